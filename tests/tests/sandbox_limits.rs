//! Hostile components against the in-process sandbox: every limit is hit,
//! reported as its own error, and the sandbox keeps serving afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillbox_e2e::component;
use skillbox_sandbox::{
    DiskCache, EngineOptions, Grants, Limits, LoadedComponent, MIB, Sandbox, SandboxError,
};

fn sandbox() -> Arc<Sandbox> {
    let cache = DiskCache::new(skillbox_e2e::repo().join("target/test-cache/components"));
    Arc::new(Sandbox::with_options(&EngineOptions::default(), Some(cache)).expect("engine"))
}

fn testbed(sandbox: &Sandbox) -> Arc<LoadedComponent> {
    sandbox
        .load_file(&component("testbed"))
        .expect("load testbed")
}

async fn call(
    sandbox: &Sandbox,
    tb: &LoadedComponent,
    function: &str,
    args: Value,
    limits: &Limits,
) -> Result<Value, SandboxError> {
    sandbox
        .call(tb, function, &args, &Grants::default(), limits)
        .await
        .map(|o| o.value)
}

async fn still_serves(sandbox: &Sandbox, tb: &LoadedComponent) {
    let value = call(sandbox, tb, "noop", json!({}), &Limits::default())
        .await
        .expect("noop after a hostile call");
    assert_eq!(value, json!(42));
}

#[tokio::test]
async fn infinite_loop_stops_at_the_timeout() {
    let sb = sandbox();
    stops_a_loop_at_the_timeout(&sb, &testbed(&sb)).await;
}

async fn stops_a_loop_at_the_timeout(sb: &Sandbox, tb: &LoadedComponent) {
    let limits = Limits {
        timeout: Duration::from_millis(300),
        fuel: u64::MAX,
        ..Limits::default()
    };
    let started = Instant::now();
    let err = call(sb, tb, "spin", json!({}), &limits).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, SandboxError::Timeout { .. }), "{err}");
    // Generous for a loaded machine; unstopped, the loop never ends.
    assert!(
        took < Duration::from_secs(20),
        "the timeout took {took:?}, far beyond its 300 ms"
    );
    assert!(err.to_string().contains("300 ms"), "{err}");
    still_serves(sb, tb).await;
}

#[tokio::test]
async fn blocking_host_call_stops_at_the_timeout() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let limits = Limits {
        timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let started = Instant::now();
    let err = call(&sb, &tb, "sleep-ms", json!({"ms": 60_000}), &limits)
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Timeout { .. }), "{err}");
    // Generous for a loaded machine; unstopped, the sleep lasts 60 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    still_serves(&sb, &tb).await;
}

#[tokio::test]
async fn fuel_exhaustion_is_reported() {
    let sb = sandbox();
    stops_at_the_fuel_limit(&sb, &testbed(&sb)).await;
}

async fn stops_at_the_fuel_limit(sb: &Sandbox, tb: &LoadedComponent) {
    let limits = Limits {
        fuel: 5_000_000,
        ..Limits::default()
    };
    let err = call(sb, tb, "burn", json!({"iterations": u64::MAX}), &limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SandboxError::OutOfFuel { fuel: 5_000_000 }),
        "{err}"
    );
    // A small job under the same budget completes.
    let ok = call(sb, tb, "burn", json!({"iterations": 1000}), &limits).await;
    assert!(ok.is_ok(), "{ok:?}");
}

#[tokio::test]
async fn memory_growth_past_the_cap_is_stopped() {
    let sb = sandbox();
    stops_memory_growth_at_the_cap(&sb, &testbed(&sb)).await;
}

async fn stops_memory_growth_at_the_cap(sb: &Sandbox, tb: &LoadedComponent) {
    let limits = Limits {
        memory_bytes: 32 * MIB,
        ..Limits::default()
    };
    let err = call(sb, tb, "grow-memory", json!({"mib": 200}), &limits)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SandboxError::MemoryLimit { limit_bytes } if limit_bytes == 32 * MIB),
        "{err}"
    );
    assert!(err.to_string().contains("32 MiB"), "{err}");
    let fits = call(sb, tb, "grow-memory", json!({"mib": 8}), &limits).await;
    assert_eq!(fits.unwrap(), json!(8));
}

#[tokio::test]
async fn runaway_recursion_is_contained() {
    let sb = sandbox();
    let tb = testbed(&sb);
    stops_runaway_recursion(&sb, &tb).await;
    // Rust guests keep large frames on a shadow stack in linear memory;
    // overflowing that one runs off the bottom of memory, a trap.
    let err = call(
        &sb,
        &tb,
        "recurse-big-frames",
        json!({"depth": 100_000_000u64}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SandboxError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("deep recursion"), "{err}");
    still_serves(&sb, &tb).await;
}

async fn stops_runaway_recursion(sb: &Sandbox, tb: &LoadedComponent) {
    let depth = json!({"depth": 100_000_000u64});
    let err = call(sb, tb, "recurse", depth, &Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::StackOverflow), "{err}");
}

#[tokio::test]
async fn printing_100_mb_hits_the_output_cap() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let started = Instant::now();
    let err = call(
        &sb,
        &tb,
        "flood-stdout",
        json!({"bytes": 100_000_000u64}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, SandboxError::OutputLimit { stream: "stdout", limit } if limit == MIB),
        "{err}"
    );
    // Stopped at the cap, not after writing all 100 MB.
    assert!(started.elapsed() < Duration::from_secs(5));
    still_serves(&sb, &tb).await;
}

#[tokio::test]
async fn returning_100_mb_is_refused() {
    let sb = sandbox();
    let tb = testbed(&sb);
    // With the default 64 MiB memory the string cannot even be built.
    let err = call(
        &sb,
        &tb,
        "big-string",
        json!({"bytes": 100_000_000u64}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, SandboxError::MemoryLimit { .. }), "{err}");
    // With room to build it, the result cap refuses it.
    let roomy = Limits {
        memory_bytes: 512 * MIB,
        ..Limits::default()
    };
    let err = call(
        &sb,
        &tb,
        "big-string",
        json!({"bytes": 100_000_000u64}),
        &roomy,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            SandboxError::OutputLimit {
                stream: "result",
                ..
            }
        ),
        "{err}"
    );
    still_serves(&sb, &tb).await;
}

#[tokio::test]
async fn a_looping_guest_does_not_stall_other_calls() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let looping = {
        let (sb, tb) = (sb.clone(), tb.clone());
        tokio::spawn(async move {
            let limits = Limits {
                timeout: Duration::from_secs(3),
                fuel: u64::MAX,
                ..Limits::default()
            };
            call(&sb, &tb, "spin", json!({}), &limits).await
        })
    };
    // The looping call holds its sandbox slot from before it starts.
    while sb.running() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    for _ in 0..20 {
        still_serves(&sb, &tb).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "20 calls took {:?} beside a looping guest",
        started.elapsed()
    );
    assert!(!looping.is_finished(), "the loop should still be running");
    let err = looping.await.unwrap().unwrap_err();
    assert!(matches!(err, SandboxError::Timeout { .. }));
}

#[tokio::test]
async fn dropping_a_call_cancels_the_guest() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let limits = Limits {
        timeout: Duration::from_secs(60),
        fuel: u64::MAX,
        ..Limits::default()
    };
    let started = Instant::now();
    let cut = tokio::time::timeout(
        Duration::from_millis(200),
        call(&sb, &tb, "spin", json!({}), &limits),
    )
    .await;
    assert!(cut.is_err(), "the spin call should still have been running");
    // Dropping returns at once; the guest's own limit is 60 s away.
    assert!(started.elapsed() < Duration::from_secs(20));
    still_serves(&sb, &tb).await;
}

#[tokio::test]
async fn a_guest_panic_is_a_trap_with_its_message() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let err = call(
        &sb,
        &tb,
        "crash",
        json!({"message": "boom at line 7"}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    match &err {
        SandboxError::Trap { stderr, .. } => assert!(stderr.contains("boom at line 7"), "{err}"),
        other => panic!("expected a trap, got {other}"),
    }
    still_serves(&sb, &tb).await;
}

#[tokio::test]
async fn an_err_result_is_a_tool_error() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let err = call(
        &sb,
        &tb,
        "fail",
        json!({"message": "the file is empty"}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    match err {
        SandboxError::ToolError { message, value } => {
            assert_eq!(message, "the file is empty");
            assert_eq!(value, json!("the file is empty"));
        }
        other => panic!("expected a tool error, got {other}"),
    }
}

#[tokio::test]
async fn invalid_arguments_are_refused_before_any_guest_code_runs() {
    let sb = sandbox();
    let tb = testbed(&sb);
    // If the guest ran, this would loop until the timeout.
    let err = call(
        &sb,
        &tb,
        "spin",
        json!({"unexpected": 1}),
        &Limits::default(),
    )
    .await
    .unwrap_err();
    // The kind is the proof: a guest that ran would have ended in a timeout.
    assert!(matches!(err, SandboxError::InvalidArguments(_)), "{err}");
    assert!(
        err.to_string()
            .contains("`unexpected` is not a known argument"),
        "{err}"
    );
}

#[tokio::test]
async fn unknown_function_lists_the_available_ones() {
    let sb = sandbox();
    let tb = testbed(&sb);
    let err = call(&sb, &tb, "nope", json!({}), &Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::NoSuchFunction { .. }));
    assert!(err.to_string().contains("noop"), "{err}");
}

#[test]
fn a_component_is_compiled_once_per_process() {
    let sb = sandbox();
    let a = testbed(&sb);
    let b = testbed(&sb);
    assert!(Arc::ptr_eq(&a, &b));
    assert!(a.digest.starts_with("sha256:"));
}

#[test]
fn the_disk_cache_serves_a_second_process() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(component("testbed")).unwrap();
    let first = Sandbox::with_options(
        &EngineOptions::default(),
        Some(DiskCache::new(dir.path().to_path_buf())),
    )
    .unwrap();
    let loaded = first.load_bytes(&bytes).unwrap();
    assert_eq!(loaded.origin, skillbox_sandbox::CompileOrigin::Compiled);
    let second = Sandbox::with_options(
        &EngineOptions::default(),
        Some(DiskCache::new(dir.path().to_path_buf())),
    )
    .unwrap();
    let cached = second.load_bytes(&bytes).unwrap();
    assert_eq!(cached.origin, skillbox_sandbox::CompileOrigin::DiskCache);
    assert_eq!(cached.exports.names(), loaded.exports.names());
}

#[test]
fn bytes_that_are_not_a_component_get_a_clear_error() {
    let sb = sandbox();
    let err = sb.load_bytes(b"hello").expect_err("refused");
    assert!(err.to_string().contains("not WebAssembly"), "{err}");
    // A core module (version 1, layer 0) is not a component.
    let err = sb.load_bytes(b"\0asm\x01\0\0\0").expect_err("refused");
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
}

/// The baseline compiler's code, which a large component's first run on a
/// machine executes, is held to the same limits as Cranelift's: the limits
/// live in the generated code (fuel counters, epoch checks, stack and
/// memory bounds), so each is hit again here on code only Winch compiled.
#[tokio::test]
async fn baseline_compiled_code_is_held_to_every_limit() {
    if !has_a_baseline_compiler() {
        return;
    }
    let options = EngineOptions {
        baseline_only: true,
        ..EngineOptions::default()
    };
    let sb = Sandbox::with_options(&options, None).expect("engine");
    let tb = testbed(&sb);
    assert_eq!(tb.origin, skillbox_sandbox::CompileOrigin::Quick);
    assert!(tb.is_optimized(), "a baseline-only engine never optimizes");
    stops_a_loop_at_the_timeout(&sb, &tb).await;
    stops_at_the_fuel_limit(&sb, &tb).await;
    stops_memory_growth_at_the_cap(&sb, &tb).await;
    stops_runaway_recursion(&sb, &tb).await;
    still_serves(&sb, &tb).await;
}

/// A large component missing from the cache runs its first call on
/// baseline code, while the optimizing compile runs beside it; that
/// compile's code is stored for the next process and replaces the baseline
/// code for later calls of this one.
#[tokio::test]
async fn a_large_component_runs_quickly_compiled_until_its_optimized_code_is_ready() {
    if !has_a_baseline_compiler() {
        return;
    }
    let bytes = std::fs::read(component("testbed")).unwrap();
    // Padded with a custom section to cross the size at which the quick
    // compile starts; custom sections are not code, and the digest changes.
    let large = with_custom_section(&bytes, skillbox_sandbox::QUICK_COMPILE_MIN_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let cache = || Some(DiskCache::new(dir.path().to_path_buf()));
    let first = Sandbox::with_options(&EngineOptions::default(), cache()).unwrap();
    let loaded = first.load_bytes(&large).unwrap();
    assert_eq!(loaded.origin, skillbox_sandbox::CompileOrigin::Quick);
    let value = call(&first, &loaded, "noop", json!({}), &Limits::default()).await;
    assert_eq!(value.unwrap(), json!(42));
    loaded.wait_optimized();
    assert!(loaded.is_optimized());
    still_serves(&first, &loaded).await;

    let second = Sandbox::with_options(&EngineOptions::default(), cache()).unwrap();
    let cached = second.load_bytes(&large).unwrap();
    assert_eq!(cached.origin, skillbox_sandbox::CompileOrigin::DiskCache);
    still_serves(&second, &cached).await;
}

/// wasmtime supports its baseline compiler on x86-64 only; elsewhere
/// every compile is Cranelift's and these tests have nothing to check.
fn has_a_baseline_compiler() -> bool {
    let has = cfg!(target_arch = "x86_64");
    if !has {
        eprintln!("skipped: no baseline compiler on this architecture");
    }
    has
}

/// `component` with a custom section appended that makes it at least
/// `size` bytes long.
fn with_custom_section(component: &[u8], size: usize) -> Vec<u8> {
    use wasm_encoder::Encode;
    let padding = wasm_encoder::CustomSection {
        name: "skillbox-test-padding".into(),
        data: vec![0; size.saturating_sub(component.len()) + 1].into(),
    };
    let mut out = component.to_vec();
    out.push(0); // the custom section's id, in components as in modules
    padding.encode(&mut out);
    out
}
