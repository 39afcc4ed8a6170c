//! `skillbox bench`: the fixed costs of the performance model, measured.
//!
//! Everything is compared within one run, as ratios and medians, because
//! the machines this runs on are shared and noisy.

mod distribution;
mod first_run;
mod http_load;
mod mcp;
mod memory;
mod metrics;
mod packages;
mod prepared;
mod python;
mod scripts;
mod shared_state;
mod table;
mod transactions;

use table::Row;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use skillbox_sandbox::{DiskCache, EngineOptions, Grants, Limits, Sandbox};

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// A component exporting `noop() -> u32`, for the per-call cost.
    #[arg(
        long,
        value_name = "PATH.wasm",
        default_value = "guest-tools/target/wasm32-wasip2/release/testbed.wasm"
    )]
    trivial: PathBuf,
    /// A real tool component whose compile time is measured.
    #[arg(
        long,
        value_name = "PATH.wasm",
        default_value = "skills/log-inspect/tools/text.wasm"
    )]
    tool: PathBuf,
    /// A large Python component (componentize-py) for the start and warm
    /// call figures; skipped when missing (scripts/build-foreign builds it).
    #[arg(
        long,
        value_name = "PATH.wasm",
        default_value = "target/foreign/wordcount.wasm"
    )]
    python: PathBuf,
    /// The Python runtime, for the script figures; skipped when missing
    /// (scripts/build-runtimes builds it).
    #[arg(
        long,
        value_name = "PATH.wasm",
        default_value = "target/runtimes/python.wasm"
    )]
    python_runtime: PathBuf,
    /// A Rust command component to compare a Python script's run with.
    #[arg(
        long,
        value_name = "PATH.wasm",
        default_value = "skills/release-check/scripts/release-check.wasm"
    )]
    rust_command: PathBuf,
    /// A bundled skill, published to a loopback registry and added back
    /// (skipped without Debian's docker-registry).
    #[arg(long, value_name = "DIR", default_value = "skills/data-peek")]
    bundled_skill: PathBuf,
    /// Calls (and process spawns) measured for the per-call cost.
    #[arg(long, default_value_t = 300)]
    iterations: usize,
    /// Cold compiles measured (each takes a while).
    #[arg(long, default_value_t = 3)]
    compiles: usize,
    /// Seconds each MCP throughput measurement runs.
    #[arg(long, default_value_t = 3.0)]
    mcp_seconds: f64,
    /// A CPython with numpy, pandas and lxml (a virtual environment's
    /// `bin/python`) to run the compiled-package scripts natively beside
    /// the full Python runtime; those rows are skipped when it lacks them.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    native_python: PathBuf,
    /// A Python with the official MCP SDK (`mcp`), whose server is
    /// measured beside skillbox's stdio round trip; skipped without it.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    sdk_python: PathBuf,
    /// Another MCP server to measure beside skillbox over stdio, as one
    /// command line in shell words (for example a WebAssembly MCP runtime
    /// serving an echo component), with `--peer-tool` and `--peer-args`.
    #[arg(long, value_name = "COMMAND")]
    peer: Option<String>,
    /// The `--peer` server's tool to call.
    #[arg(long, value_name = "NAME", default_value = "noop")]
    peer_tool: String,
    /// The arguments of each call of `--peer-tool`, as a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    peer_args: String,
    /// Skip the MCP measurements (they start server processes).
    #[arg(long)]
    no_mcp: bool,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// The rows of what sharing state through Redis costs.
fn shared_state_rows(shared: &shared_state::SharedStateFigures) -> Vec<Row> {
    let mut rows = vec![
        Row::figure(
            "MCP over HTTP, sessions, calls/s, 8 clients",
            format!("{:.0}", shared.local),
        ),
        Row::figure("  same, --state redis", format!("{:.0}", shared.redis)),
        Row::figure(
            "  latency, --state redis / own state",
            format!("{:.2}x", shared.latency_ratio()),
        )
        .target("≤ 1.2x", shared.latency_ratio() <= 1.2),
    ];
    if let Some(per_core) = shared.per_redis_core {
        rows.push(Row::figure(
            "  session calls/s per Redis core",
            format!("{per_core:.0}"),
        ));
    }
    rows
}

/// Summary of one measured quantity.
#[derive(Debug, Clone, Copy)]
struct Stats {
    median: Duration,
    p90: Duration,
    n: usize,
}

impl Stats {
    fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let n = samples.len();
        Stats {
            median: samples[n / 2],
            p90: samples[(n * 9 / 10).min(n - 1)],
            n,
        }
    }
}

/// The `--peer` server, from its command line in shell words.
fn peer(args: &BenchArgs) -> anyhow::Result<Option<mcp::Peer>> {
    let Some(line) = &args.peer else {
        return Ok(None);
    };
    let command = shlex::split(line)
        .filter(|words| !words.is_empty())
        .with_context(|| format!("--peer {line:?} is not a command line (unbalanced quotes?)"))?;
    let arguments = serde_json::from_str(&args.peer_args)
        .with_context(|| format!("--peer-args {:?} is not a JSON object", args.peer_args))?;
    Ok(Some(mcp::Peer {
        command,
        tool: args.peer_tool.clone(),
        arguments,
    }))
}

/// Other servers' round trips beside skillbox's, each with the ratio.
fn side_by_side_rows(m: &mcp::McpFigures, others: Option<&mcp::SideBySide>) -> Vec<Row> {
    let ratio = |other: &Stats| m.round_trip.median.as_secs_f64() / other.median.as_secs_f64();
    let mut rows = Vec::new();
    if let Some(sdk) = others.and_then(|o| o.python_sdk.as_ref()) {
        rows.extend([
            Row::timed("  same tool, official Python SDK server, no sandbox", sdk),
            Row::figure("  skillbox / Python SDK", format!("{:.2}x", ratio(sdk))),
        ]);
    }
    if let Some(peer) = others.and_then(|o| o.peer.as_ref()) {
        rows.extend([
            Row::timed("  same, the --peer server", peer),
            Row::figure(
                "  skillbox / the --peer server",
                format!("{:.2}x", ratio(peer)),
            )
            .target("≤ 0.5x", ratio(peer) <= 0.5),
        ]);
    }
    rows
}

/// Writes a skill folder at `dir`: its SKILL.md, then each text file at
/// its path inside the skill.
fn write_skill(
    dir: &Path,
    name: &str,
    description: &str,
    files: &[(&str, &str)],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\nRun them.\n"),
    )?;
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// The warm script rows run the runtime the library finds (its
/// environment variable first), while the cold rows compile the file given
/// with `--python-runtime`: with two different files the warm rows would
/// time Winch's quick code while Cranelift compiles the other in the
/// background.
fn same_runtime_as_the_library(given: &Path) -> anyhow::Result<()> {
    let Some(found) = skillbox_skill::runtime::python::runtime_path() else {
        return Ok(());
    };
    let same_path = match (std::fs::canonicalize(given), std::fs::canonicalize(&found)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let same_bytes =
        || matches!((std::fs::read(given), std::fs::read(&found)), (Ok(a), Ok(b)) if a == b);
    if !same_path && !same_bytes() {
        bail!(
            "--python-runtime is {given} but the library runs {found} (SKILLBOX_PYTHON_RUNTIME, \
             or the runtime next to the binary or installed): the warm script rows would time \
             one file and the cold rows the other. Pass --python-runtime {found}, or set \
             SKILLBOX_PYTHON_RUNTIME={given}.",
            given = given.display(),
            found = found.display()
        );
    }
    Ok(())
}

/// Loading the component `bytes` with the optimizing compiler: `compiles`
/// times with an empty compiled-code cache (the first fills `cache`), then
/// from `cache` in new sandboxes, as a new process would.
fn load_times(bytes: &[u8], compiles: usize, cache: &Path) -> anyhow::Result<(Stats, Stats)> {
    let load = |dir: &Path| -> anyhow::Result<Duration> {
        let sandbox =
            Sandbox::with_options(&Default::default(), Some(DiskCache::new(dir.to_path_buf())))?;
        let start = Instant::now();
        sandbox.load_bytes_optimized(bytes)?;
        Ok(start.elapsed())
    };
    let mut cold = Vec::new();
    for n in 0..compiles {
        let empty = tempfile::tempdir()?;
        cold.push(load(if n == 0 { cache } else { empty.path() })?);
    }
    let from_cache = (0..compiles.max(3))
        .map(|_| load(cache))
        .collect::<anyhow::Result<_>>()?;
    Ok((Stats::of(cold), Stats::of(from_cache)))
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    if args.iterations == 0 || args.compiles == 0 {
        bail!("--iterations and --compiles must be at least 1");
    }
    let peer = peer(&args)?;
    if args.python_runtime.is_file() {
        same_runtime_as_the_library(&args.python_runtime)?;
    }
    let trivial = std::fs::read(&args.trivial).with_context(|| {
        format!(
            "cannot read {}; build the guests first (scripts/build-guests)",
            args.trivial.display()
        )
    })?;
    let tool = std::fs::read(&args.tool).with_context(|| {
        format!(
            "cannot read {}; build the guests first (scripts/build-guests)",
            args.tool.display()
        )
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    let sandbox = Sandbox::with_options(&EngineOptions::default(), None)?;
    eprintln!("bench: {} sandboxed calls…", args.iterations);
    let calls = runtime.block_on(measure_calls(&sandbox, &trivial, args.iterations))?;
    eprintln!(
        "bench: {} sandboxed calls, on-demand allocator…",
        args.iterations
    );
    let on_demand_options = EngineOptions {
        pooling: false,
        ..EngineOptions::default()
    };
    let plain = Sandbox::with_options(&on_demand_options, None)?;
    let on_demand = runtime.block_on(measure_calls(&plain, &trivial, args.iterations))?;

    eprintln!("bench: {} native process spawns…", args.iterations);
    let mut spawn_samples = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        let start = Instant::now();
        let status = std::process::Command::new("true").status()?;
        spawn_samples.push(start.elapsed());
        if !status.success() {
            bail!("`true` failed");
        }
    }
    let spawns = Stats::of(spawn_samples);

    eprintln!("bench: {} cold compiles of the tool…", args.compiles);
    let mut compile_samples = Vec::with_capacity(args.compiles);
    for _ in 0..args.compiles {
        let start = Instant::now();
        wasmtime::component::Component::from_binary(sandbox.engine(), &tool)?;
        compile_samples.push(start.elapsed());
    }
    let cold = Stats::of(compile_samples);

    let cache_dir = tempfile::tempdir()?;
    let cached = Sandbox::with_options(
        &EngineOptions::default(),
        Some(DiskCache::new(cache_dir.path().to_path_buf())),
    )?;
    cached.load_bytes(&tool)?;
    let mut disk_samples = Vec::new();
    for _ in 0..args.compiles.max(5) {
        let fresh = Sandbox::with_options(
            &EngineOptions::default(),
            Some(DiskCache::new(cache_dir.path().to_path_buf())),
        )?;
        let start = Instant::now();
        fresh.load_bytes(&tool)?;
        disk_samples.push(start.elapsed());
    }
    let disk = Stats::of(disk_samples);

    cached.load_file(&args.tool)?;
    let mut loaded_samples = Vec::new();
    for _ in 0..args.iterations {
        let start = Instant::now();
        cached.load_file(&args.tool)?;
        loaded_samples.push(start.elapsed());
    }
    let loaded = Stats::of(loaded_samples);

    let mcp = if args.no_mcp {
        None
    } else {
        let exe = std::env::current_exe()?;
        Some(runtime.block_on(mcp::run(
            &exe,
            &args.trivial,
            args.iterations,
            args.mcp_seconds,
        ))?)
    };

    let shared = if args.no_mcp {
        None
    } else {
        let exe = std::env::current_exe()?;
        runtime.block_on(shared_state::run(&exe, &args.trivial, args.mcp_seconds))?
    };

    let side_by_side = if args.no_mcp {
        None
    } else {
        Some(runtime.block_on(mcp::side_by_side(&args.sdk_python, peer, args.iterations))?)
    };

    let python = if args.python.is_file() {
        eprintln!(
            "bench: the Python component: first tools/list with an empty cache, start to first \
             result, warm calls…"
        );
        Some(runtime.block_on(python::run(&args.python, args.iterations.min(100)))?)
    } else {
        eprintln!(
            "bench: {} is missing; scripts/build-foreign builds it (Python figures skipped)",
            args.python.display()
        );
        None
    };

    let scripts = if args.python_runtime.is_file() && args.rust_command.is_file() {
        eprintln!(
            "bench: Python scripts: the runtime cold and cached, warm runs beside a Rust command component…"
        );
        Some(runtime.block_on(scripts::run(
            &args.python_runtime,
            &args.rust_command,
            args.compiles,
            args.iterations.min(50),
        ))?)
    } else {
        eprintln!(
            "bench: {} is missing; scripts/build-runtimes builds it (Python script figures skipped)",
            args.python_runtime.display()
        );
        None
    };

    let first_run = if args.python_runtime.is_file() {
        eprintln!(
            "bench: the first Python script on a machine, as new CLI processes with an empty cache…"
        );
        Some(first_run::run(
            &std::env::current_exe()?,
            &args.python_runtime,
            args.compiles,
        )?)
    } else {
        None
    };

    let prepared = if args.python_runtime.is_file() {
        eprintln!(
            "bench: a pypdf script (prepared from PyPI) as new CLI processes, beside the host's \
             CPython…"
        );
        prepared::run(
            &std::env::current_exe()?,
            &args.python_runtime,
            &args.native_python,
            args.iterations.min(10),
        )?
    } else {
        None
    };

    eprintln!(
        "bench: compiled packages: the full Python runtime cold, numpy, pandas and lxml \
         scripts warm beside the host's CPython…"
    );
    let packages = runtime.block_on(packages::run(
        &args.native_python,
        args.compiles,
        args.iterations.min(20),
    ))?;
    if packages.is_none() {
        eprintln!(
            "bench: the full Python runtime is not installed; scripts/build-python-full builds \
             it (compiled-package figures skipped)"
        );
    }

    let distribution = runtime.block_on(distribution::run(
        &args.trivial,
        &args.bundled_skill,
        args.iterations,
    ))?;

    let txn = runtime.block_on(transactions::run(&args.trivial, args.iterations))?;

    let memory = memory::run(args.iterations)?;

    eprintln!("bench: metrics: counting a call, rendering a scrape…");
    let metrics_cost = metrics::run(args.iterations);

    let ratio = ratio_f(spawns.median, calls.median);
    let mut rows = vec![
        Row::timed("sandboxed call (new store+instantiate+call)", &calls)
            .target("≤ 10 µs", calls.median <= Duration::from_micros(10)),
        Row::timed("  same, on-demand allocator (no pooling)", &on_demand),
        Row::timed("native process spawn (`true`)", &spawns),
        Row::figure("spawn / sandboxed call", format!("{ratio:.1}x"))
            .target("≥ 10x", ratio >= 10.0),
        Row::timed("compile tool component, cold", &cold),
        Row::timed("load tool component from disk cache", &disk),
        Row::timed("load tool component, already loaded", &loaded),
        Row::timed("metrics: count one call", &metrics_cost.observe),
        Row::timed("metrics: render a scrape, 50 tools", &metrics_cost.render),
    ];
    if let Some(m) = &mcp {
        rows.extend([
            Row::timed("MCP tools/call round trip, stdio", &m.round_trip).target(
                "≤ 150 µs",
                m.round_trip.median <= Duration::from_micros(150),
            ),
        ]);
        rows.extend(side_by_side_rows(m, side_by_side.as_ref()));
        rows.extend([
            Row::figure(
                "MCP over HTTP, calls/s, 1 client",
                format!("{:.0}", m.calls_per_sec_1),
            ),
            Row::figure(
                "MCP over HTTP, calls/s, 8 clients",
                format!("{:.0}", m.calls_per_sec_8),
            )
            .target("≥ 20,000", m.calls_per_sec_8 >= 20_000.0),
            Row::figure(
                "metrics counting, share of a stdio round trip",
                format!(
                    "{:.2} %",
                    metrics::share(metrics_cost.observe.median, m.round_trip.median)
                ),
            )
            .target(
                "≤ 1 %",
                metrics::share(metrics_cost.observe.median, m.round_trip.median) <= 1.0,
            ),
            Row::timed("start to first tools/list, 4 skills", &m.startup_4),
            Row::timed("start to first tools/list, 50 skills", &m.startup_50)
                .target("≤ 20 ms", m.startup_50.median <= Duration::from_millis(20)),
            Row::timed(
                "  same, 50 installed skills checked against the lock",
                &m.startup_50_locked,
            )
            .target(
                "≤ 20 ms",
                m.startup_50_locked.median <= Duration::from_millis(20),
            ),
            Row::timed("start to first tools/list, 3,001 skills", &m.startup_3000),
        ]);
        if let Some(shared) = &shared {
            rows.extend(shared_state_rows(shared));
        }
        if let Some(rss) = m.idle_rss_50 {
            rows.push(
                Row::figure(
                    "idle RSS, 50 skills, every tool listed",
                    format!("{:.1} MiB", rss as f64 / (1 << 20) as f64),
                )
                .target("≤ 64 MiB", rss <= 64 << 20),
            );
        }
    }
    let verify_cost = distribution
        .catalog_50_locked
        .median
        .saturating_sub(distribution.catalog_50.median);
    rows.extend([
        Row::timed("catalog of 50 skills", &distribution.catalog_50),
        Row::timed(
            "  same, installed: each checked against its lock",
            &distribution.catalog_50_locked,
        ),
        Row::figure(
            "verifying 50 installed skills: cost added",
            human(verify_cost),
        )
        .target("≤ 20 ms", verify_cost <= Duration::from_millis(20)),
    ]);
    let read_ratio = ratio_f(txn.read_staged.median, txn.read_unstaged.median);
    let write_added = txn
        .write_staged
        .median
        .saturating_sub(txn.write_direct.median);
    rows.extend([
        Row::timed(
            "read 1 file, 10,000-file workspace, read-only grant",
            &txn.read_unstaged,
        ),
        Row::timed("  same, writable grant (staged)", &txn.read_staged)
            .target("≤ 1.1x the read-only call", read_ratio <= 1.1),
        Row::timed("write 1 small file to /tmp (not staged)", &txn.write_direct),
        Row::timed(
            "write 1 small file to the workspace, staged + committed",
            &txn.write_staged,
        ),
        Row::figure("staging and committing it: cost added", human(write_added))
            .target("≤ 200 µs", write_added <= Duration::from_micros(200)),
        Row::timed("  of which the commit's 3 syncs to disk", &txn.syncs),
        Row::figure(
            "  the rest: staging, journal, copy and rename",
            human(write_added.saturating_sub(txn.syncs.median)),
        ),
        Row::timed("commit a call that wrote 100 files", &txn.commit_100),
        Row::timed("memory_search, 10,000 entries, top 5", &memory.search_10k).target(
            "≤ 5 ms",
            memory.search_10k.median <= Duration::from_millis(5),
        ),
        Row::timed("  same, a word all 10,000 entries have", &memory.search_all),
        Row::timed("memory_save, synced to disk", &memory.save),
    ]);
    if let (Some(publish), Some(add)) = (&distribution.publish, &distribution.add) {
        rows.extend([
            Row::timed("publish a bundled skill, signed (loopback)", publish),
            Row::timed("add it: pull, verify, check, install", add),
        ]);
    }
    if let Some(p) = &python {
        rows.extend([
            Row::timed(
                "first tools/list, empty cache, + a Python tool",
                &p.first_list_cold,
            )
            .target("≤ 1 s", p.first_list_cold.median <= Duration::from_secs(1)),
            Row::timed(
                "Python component: second start to first result",
                &p.second_start,
            )
            .target(
                "≤ 100 ms",
                p.second_start.median <= Duration::from_millis(100),
            ),
            Row::timed("Python component: warm call", &p.warm_call)
                .target("≤ 1 ms", p.warm_call.median <= Duration::from_millis(1)),
        ]);
    }
    if let Some(s) = &scripts {
        let ratio = ratio_f(s.python_run.median, s.rust_run.median);
        rows.extend([
            Row::timed("Python runtime: optimizing compile, empty cache", &s.cold),
            Row::timed("Python runtime: load from disk cache", &s.from_cache).target(
                "≤ 500 ms",
                s.from_cache.median <= Duration::from_millis(500),
            ),
            Row::timed("Python script run, warm (call path)", &s.python_run)
                .target("≤ 5 ms", s.python_run.median <= Duration::from_millis(5)),
            Row::timed("Rust command component run, warm", &s.rust_run),
            Row::figure("Python script / Rust command run", format!("{ratio:.1}x")),
            Row::timed(
                "Python script print(1), warm (call path)",
                &s.smallest_script,
            ),
            Row::timed("run_code print(1), warm (call path)", &s.smallest_code).target(
                "≤ 1.1x script print(1)",
                s.smallest_code.median.as_secs_f64()
                    <= 1.1 * s.smallest_script.median.as_secs_f64(),
            ),
            Row::timed("script with a nested Python print(1)", &s.nested_python),
            Row::figure(
                "  nested Python child: cost added",
                human(
                    s.nested_python
                        .median
                        .saturating_sub(s.smallest_script.median),
                ),
            ),
        ]);
        let files = &s.file_work;
        rows.extend([
            Row::timed("a script's file work, per operation: stat", &files.stat),
            Row::timed("  open, read and close a small file", &files.read),
            Row::timed("  list a folder", &files.list),
            Row::timed("  write a small file to /tmp", &files.write),
        ]);
        if let Some(granted) = &s.granted_true {
            // What the OS sandbox adds to spawning `true`: the script's
            // run less the script alone and less a direct spawn.
            let added = granted
                .median
                .saturating_sub(s.smallest_script.median)
                .saturating_sub(spawns.median);
            rows.extend([
                Row::timed("script running granted `true` (OS sandbox)", granted),
                Row::figure(
                    "  granted program: cost added over a direct spawn",
                    human(added),
                )
                .target("≤ 10 ms", added <= Duration::from_millis(10)),
            ]);
        }
    }
    if let Some(f) = &first_run {
        rows.extend([
            Row::timed(
                "first Python script on a machine, to its output",
                &f.first_output,
            )
            .target(
                "≤ 1.5 s",
                f.first_output.median <= Duration::from_millis(1500),
            ),
            Row::timed("  same process to exit (optimizing compile kept)", &f.exit),
            Row::timed("  the next process, to its output", &f.second_output),
        ]);
    }
    if let Some(p) = &prepared {
        rows.push(Row::timed(
            "pypdf script (prepared), new CLI process",
            &p.sandbox,
        ));
        if let Some(native) = &p.native {
            let ratio = ratio_f(p.sandbox.median, native.median);
            rows.extend([
                Row::timed("  pypdf, host CPython (new process)", native),
                Row::figure("  pypdf: sandbox / native", format!("{ratio:.1}x"))
                    .target("≤ 1.5x", ratio <= 1.5),
            ]);
        }
    }
    if let Some(p) = &packages {
        rows.extend([
            Row::timed("full Python runtime: load, empty cache", &p.cold),
            Row::timed("full Python runtime: load from disk cache", &p.from_cache),
            Row::figure(
                "full Python runtime: size on disk",
                format!("{:.0} MiB", p.size as f64 / (1 << 20) as f64),
            ),
            Row::timed("script `import numpy`, warm (call path)", &p.numpy_import),
            Row::timed("numpy + pandas group-by script, warm", &p.pandas_run),
        ]);
        if let Some(native) = &p.pandas_native {
            let ratio = ratio_f(p.pandas_run.median, native.median);
            rows.extend([
                Row::timed("  pandas, host CPython (new process)", native),
                Row::figure("  pandas: sandbox / native", format!("{ratio:.1}x"))
                    .target("≤ 1x", ratio <= 1.0),
            ]);
        }
        rows.push(Row::timed("lxml parse + XPath script, warm", &p.lxml_run));
        if let Some(native) = &p.lxml_native {
            let ratio = ratio_f(p.lxml_run.median, native.median);
            rows.extend([
                Row::timed("  lxml, host CPython (new process)", native),
                Row::figure("  lxml: sandbox / native", format!("{ratio:.1}x"))
                    .target("≤ 1x", ratio <= 1.0),
            ]);
        }
    }
    if args.json {
        let mut out = serde_json::Map::new();
        for row in &rows {
            out.insert(row.key(), row.json());
        }
        out.insert("tool_bytes".into(), json!(tool.len()));
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{:<48} {:>12} {:>12} {:>6}  {:<10}",
            "measure", "median", "p90", "n", "target"
        );
        for row in &rows {
            println!("{row}");
        }
        println!();
        println!(
            "cold compile / disk-cache load (median): {:.1}x  ({} KiB component)",
            ratio_f(cold.median, disk.median),
            tool.len() / 1024
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The cost of `noop()` calls: a fresh store, an instance and a call each.
async fn measure_calls(
    sandbox: &Sandbox,
    trivial: &[u8],
    iterations: usize,
) -> anyhow::Result<Stats> {
    let noop = sandbox.load_bytes(trivial)?;
    let (grants, limits, args) = (Grants::default(), Limits::default(), json!({}));
    // One warm-up call so lazy engine set-up is not counted.
    sandbox.call(&noop, "noop", &args, &grants, &limits).await?;
    // Then a server's steady state: its scratch folders are more than a
    // second old, and are judged by their times alone (`sandbox/scratch.rs`).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        sandbox.call(&noop, "noop", &args, &grants, &limits).await?;
        samples.push(start.elapsed());
    }
    Ok(Stats::of(samples))
}

fn ratio_f(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

fn micros(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

fn human(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}
