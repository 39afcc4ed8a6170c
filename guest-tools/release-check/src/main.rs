//! release-check: is the workspace ready to release?
//!
//! Reads the version from Cargo.toml or package.json, checks that the
//! changelog's top entry is that version, and that no TODO or FIXME is left
//! in the files changed for the release. Prints blocking items, risks and
//! passed checks; exits 0 when nothing blocks and non-zero when something
//! does or the call is wrong. (WASI 0.2's exit carries only success or
//! failure, so the host sees every failure as exit code 1.)
//!
//! Usage: release-check [--json] [--root DIR] [CHANGED_FILE…]
//! Changed files may also come one per line on stdin (for example the
//! output of `git diff --name-only v1.2.0`).

use std::fs;
use std::io::Read;
use std::path::Path;

use guest_common::WORKSPACE;

const CHANGELOGS: [&str; 4] = ["CHANGELOG.md", "CHANGES.md", "HISTORY.md", "CHANGELOG"];
const MAX_FILE_BYTES: u64 = 1 << 20;
const MAX_SCANNED_FILES: usize = 5000;
const MAX_LISTED: usize = 50;
const SKIPPED_DIRS: [&str; 4] = ["target", "node_modules", "dist", "vendor"];

#[derive(Default)]
struct Report {
    version: Option<(String, &'static str)>,
    blocking: Vec<String>,
    risks: Vec<String>,
    passed: Vec<String>,
}

struct Options {
    json: bool,
    root: String,
    changed: Vec<String>,
}

fn main() {
    let options = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("release-check: {msg}");
            eprintln!(
                "usage: release-check [--json] [--root DIR] [CHANGED_FILE…]  (changed files may also come on stdin)"
            );
            std::process::exit(2);
        }
    };
    if !Path::new(&options.root).is_dir() {
        eprintln!(
            "release-check: cannot see {}; run it with the workspace granted (--workspace DIR)",
            options.root
        );
        std::process::exit(2);
    }
    let report = check(&options);
    if options.json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", to_text(&report));
    }
    std::process::exit(if report.blocking.is_empty() { 0 } else { 1 });
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        json: false,
        root: WORKSPACE.to_string(),
        changed: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => options.json = true,
            "--root" => options.root = args.next().ok_or("--root needs a folder")?,
            "-h" | "--help" => return Err("help requested".into()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            path => options.changed.push(path.to_string()),
        }
    }
    let mut stdin = String::new();
    let _ = std::io::stdin().take(1 << 20).read_to_string(&mut stdin);
    options.changed.extend(
        stdin
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from),
    );
    Ok(options)
}

fn check(options: &Options) -> Report {
    let mut report = Report::default();
    let root = options.root.as_str();
    check_version(root, &mut report);
    check_changelog(root, &mut report);
    check_markers(root, &options.changed, &mut report);
    report
}

fn check_version(root: &str, report: &mut Report) {
    let cargo = fs::read_to_string(format!("{root}/Cargo.toml")).ok();
    let npm = fs::read_to_string(format!("{root}/package.json")).ok();
    let found = cargo
        .as_deref()
        .and_then(cargo_version)
        .map(|v| (v, "Cargo.toml"))
        .or_else(|| {
            npm.as_deref()
                .and_then(npm_version)
                .map(|v| (v, "package.json"))
        });
    match found {
        Some((version, source)) => {
            report.passed.push(format!("version {version} read from {source}"));
            if version.contains('-') {
                report.risks.push(format!("version {version} is a pre-release; make sure that is intended"));
            }
            report.version = Some((version, source));
        }
        None if cargo.is_none() && npm.is_none() => report
            .blocking
            .push("no Cargo.toml or package.json at the workspace root: the version is unknown".into()),
        None => report.blocking.push(
            "no version in Cargo.toml ([package] or [workspace.package]) or package.json (\"version\")".into(),
        ),
    }
}

fn cargo_version(text: &str) -> Option<String> {
    let doc: toml::Table = text.parse().ok()?;
    let from = |t: Option<&toml::Value>| t?.get("version")?.as_str().map(String::from);
    from(doc.get("package")).or_else(|| from(doc.get("workspace").and_then(|w| w.get("package"))))
}

/// The top-level "version" of package.json, found without a JSON library:
/// the first `"version"` key at nesting depth one.
fn npm_version(text: &str) -> Option<String> {
    let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
        } else {
            match b {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth -= 1,
                b'"' if depth == 1 && text[i..].starts_with("\"version\"") => {
                    let rest = text[i + 9..].trim_start().strip_prefix(':')?.trim_start();
                    let value = rest.strip_prefix('"')?;
                    return Some(value[..value.find('"')?].to_string());
                }
                b'"' => in_str = true,
                _ => {}
            }
        }
        i += 1;
    }
    None
}

fn check_changelog(root: &str, report: &mut Report) {
    let Some((name, text)) = CHANGELOGS.iter().find_map(|n| {
        fs::read_to_string(format!("{root}/{n}"))
            .ok()
            .map(|t| (*n, t))
    }) else {
        report.blocking.push(
            "no CHANGELOG.md at the workspace root; add one with an entry for this version".into(),
        );
        return;
    };
    let Some(heading) = text.lines().find(|l| l.starts_with("## ")) else {
        report
            .blocking
            .push(format!("{name} has no entries (no `## ` headings)"));
        return;
    };
    let title = heading.trim_start_matches('#').trim();
    if title.to_ascii_lowercase().contains("unreleased") {
        let want = report
            .version
            .as_ref()
            .map_or("the version".to_string(), |(v, _)| v.clone());
        report.blocking.push(format!(
            "{name}: the top entry is \"Unreleased\"; rename it to {want} with the release date"
        ));
        return;
    }
    let entry_version = title
        .split(|c: char| c.is_whitespace() || matches!(c, '[' | ']' | '(' | ')'))
        .map(|w| w.trim_start_matches('v'))
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'));
    match (entry_version, &report.version) {
        (Some(found), Some((want, source))) if found == want => {
            report.passed.push(format!("{name}: top entry is {found}, matching {source}"));
            if !has_date(title) {
                report.risks.push(format!("{name}: the top entry has no release date"));
            }
        }
        (Some(found), Some((want, source))) => report.blocking.push(format!(
            "{name}: the top entry is {found}, but {source} says {want}; add a `## {want}` entry on top"
        )),
        (None, _) => report.blocking.push(format!("{name}: the top entry `{heading}` names no version")),
        (Some(found), None) => report.risks.push(format!("{name}: top entry {found} could not be compared")),
    }
}

/// Whether `text` contains a `YYYY-MM-DD` date.
fn has_date(text: &str) -> bool {
    text.as_bytes().windows(10).any(|w| {
        w.iter().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                *b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
    })
}

fn check_markers(root: &str, changed: &[String], report: &mut Report) {
    let files: Vec<String> = if changed.is_empty() {
        let mut all = Vec::new();
        walk(root, "", &mut all);
        report.risks.push(format!(
            "no list of changed files was given, so all {} text files were scanned; pass the changed paths as arguments or on stdin",
            all.len()
        ));
        all
    } else {
        changed
            .iter()
            .map(|p| p.trim_start_matches("./").to_string())
            .collect()
    };
    let (mut hits, mut missing, mut scanned) = (Vec::new(), Vec::new(), 0usize);
    for rel in &files {
        let Ok(text) = read_text(&format!("{root}/{rel}")) else {
            missing.push(rel.clone());
            continue;
        };
        scanned += 1;
        for (n, line) in text.lines().enumerate() {
            if let Some(marker) = ["TODO", "FIXME"].into_iter().find(|m| line.contains(m)) {
                hits.push(format!(
                    "{rel}:{}: {marker} left in a file changed for this release: {}",
                    n + 1,
                    clip(line.trim(), 120)
                ));
            }
        }
    }
    if hits.is_empty() {
        report
            .passed
            .push(format!("no TODO or FIXME in the {scanned} changed files"));
    } else {
        let total = hits.len();
        report.blocking.extend(hits.into_iter().take(MAX_LISTED));
        if total > MAX_LISTED {
            report.blocking.push(format!(
                "… and {} more TODO/FIXME lines",
                total - MAX_LISTED
            ));
        }
    }
    if !missing.is_empty() {
        report.risks.push(format!(
            "{} changed files could not be read (deleted, binary or too large): {}",
            missing.len(),
            clip(&missing.join(", "), 300)
        ));
    }
}

fn read_text(path: &str) -> std::io::Result<String> {
    let meta = fs::metadata(path)?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    String::from_utf8(fs::read(path)?).map_err(|_| std::io::ErrorKind::InvalidData.into())
}

fn walk(dir: &str, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= MAX_SCANNED_FILES {
            return;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.')
            || SKIPPED_DIRS.contains(&name.as_str())
            || CHANGELOGS.contains(&name.as_str())
        {
            continue;
        }
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&format!("{dir}/{name}"), &rel, out),
            Ok(t) if t.is_file() => out.push(rel),
            _ => {}
        }
    }
}

fn clip(s: &str, max: usize) -> String {
    guest_common::clip(s, max)
}

fn to_text(report: &Report) -> String {
    let mut out = String::new();
    match &report.version {
        Some((v, source)) => out.push_str(&format!(
            "release-check for version {v} (from {source})\n\n"
        )),
        None => out.push_str("release-check (version unknown)\n\n"),
    }
    for (title, items) in [
        ("BLOCKING", &report.blocking),
        ("RISKS", &report.risks),
        ("PASSED", &report.passed),
    ] {
        out.push_str(&format!("{title} ({})\n", items.len()));
        for item in items {
            out.push_str(&format!("  - {item}\n"));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "RESULT: {} ({} blocking, {} risks, {} passed)\n",
        if report.blocking.is_empty() {
            "READY"
        } else {
            "BLOCKED"
        },
        report.blocking.len(),
        report.risks.len(),
        report.passed.len()
    ));
    out
}

fn to_json(report: &Report) -> String {
    let list = |items: &[String]| {
        format!(
            "[{}]",
            items
                .iter()
                .map(|s| json_str(s))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    let (version, source) = match &report.version {
        Some((v, s)) => (json_str(v), json_str(s)),
        None => ("null".into(), "null".into()),
    };
    format!(
        "{{\"version\":{version},\"source\":{source},\"ready\":{},\"blocking\":{},\"risks\":{},\"passed\":{}}}",
        report.blocking.is_empty(),
        list(&report.blocking),
        list(&report.risks),
        list(&report.passed)
    )
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
