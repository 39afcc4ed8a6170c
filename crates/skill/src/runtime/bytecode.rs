//! Byte-compiling a skill's prepared packages, once, at `prepare`.
//!
//! The prepared folder is sealed read-only and CPython writes no
//! `__pycache__` there, so without this every run compiled each module it
//! imported from source: 0.6 s of the 0.7 s a `pypdf` import took. At
//! `prepare`, the Python runtime itself compiles them (bytecode is its own
//! CPython's), into `__pycache__` beside each module, before the folder is
//! sealed. The files are hash-based pycs that CPython checks against the
//! source's hash at import: a module changed by hand is compiled from its
//! source again, and file times play no part.
//!
//! The runtime runs in the sandbox like any call, with the staged
//! packages folder as its workspace, so its writes are staged and commit
//! only if it finishes; a failure leaves no pyc behind and `prepare` goes
//! on without them.

use std::path::Path;

use super::packages::Compiled;
use crate::sandbox::{Grants, Limits, MIB, Sandbox, SideEffect, WorkspaceGrant};

/// What the runtime runs: compile each module under `/workspace` with the
/// path it has at run time (`/packages/...`) in its tracebacks. Written
/// with plain writes, which retry short ones; `py_compile` does not. A
/// module that does not compile (a Python 2 file, a template, one too
/// deep or large) is left to be compiled at run time, as before.
const COMPILE: &str = r#"
import importlib.util, os, sys
from importlib._bootstrap_external import _code_to_hash_pyc
compiled = skipped = 0
for root, dirs, files in os.walk("/workspace"):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for name in sorted(files):
        if not name.endswith(".py"):
            continue
        path = os.path.join(root, name)
        with open(path, "rb") as f:
            source = f.read()
        try:
            code = compile(source, "/packages" + path[len("/workspace"):], "exec", dont_inherit=True)
        except Exception:
            skipped += 1
            continue
        pyc = _code_to_hash_pyc(code, importlib.util.source_hash(source), checked=True)
        target = importlib.util.cache_from_source(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(pyc)
        compiled += 1
print(compiled, skipped)
"#;

/// Compiles the modules of the packages folder `site` with the Python
/// runtime at `runtime`, writing their pycs into `site`. Runs the sandbox
/// on the caller's async runtime.
pub async fn compile_site(
    sandbox: &Sandbox,
    runtime: &Path,
    site: &Path,
) -> Result<Compiled, String> {
    // Optimized, so the compile also fills the cache for the first script.
    let component = sandbox
        .load_file_optimized(runtime)
        .map_err(|e| format!("the Python runtime could not be loaded: {e}"))?;
    let grants = Grants {
        workspace: Some(WorkspaceGrant {
            host_dir: site.to_path_buf(),
            writable: true,
        }),
        ..Grants::default()
    };
    let limits = Limits {
        timeout: std::time::Duration::from_secs(600),
        fuel: u64::MAX / 2,
        workspace_bytes: 4096 * MIB as u64,
        workspace_entries: 1_000_000,
        memory_bytes: 1024 * MIB,
        ..Limits::for_class(SideEffect::Write)
    };
    let argv = super::python::code_argv(COMPILE.to_string(), Vec::new());
    let out = sandbox
        .run_script(&component, argv, Vec::new(), &grants, &limits)
        .await
        .map_err(|e| e.to_string())?;
    if out.exit_code != 0 {
        let said = out.stderr.trim().lines().last().unwrap_or_default();
        return Err(format!(
            "the compile exited with {} ({said})",
            out.exit_code
        ));
    }
    let mut counts = out.stdout.split_whitespace().map(str::parse::<usize>);
    match (counts.next(), counts.next()) {
        (Some(Ok(modules)), Some(Ok(skipped))) => Ok(Compiled { modules, skipped }),
        _ => Err(format!("the compile said `{}`", out.stdout.trim())),
    }
}
