//! Which functions a component exports, and their typed signatures.

use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex};

use super::json_schema::params_schema;
use super::wit::{TypeBudget, Unsupported, WitType};

/// Largest input schema one tool may have, as JSON text.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// One exported function that can be served as a tool.
#[derive(Debug, Clone)]
pub struct ExportedFunction {
    /// The tool-facing name: the function's own name, or
    /// `<interface>-<function>` when two interfaces export the same name.
    pub name: String,
    /// The exporting interface (`pkg:ns/iface@ver`), if not a top-level export.
    pub interface: Option<String>,
    /// The function's name inside its interface.
    pub function: String,
    pub params: Vec<(String, WitType)>,
    pub result: Option<WitType>,
}

impl ExportedFunction {
    pub fn input_schema(&self) -> serde_json::Value {
        params_schema(&self.params)
    }
}

/// An export that could not become a tool, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedExport {
    pub name: String,
    pub reason: String,
}

/// Everything the host learned from a component's own type information.
#[derive(Debug, Clone, Default)]
pub struct ComponentExports {
    pub functions: Vec<ExportedFunction>,
    pub skipped: Vec<SkippedExport>,
    /// Whether it exports `wasi:cli/run`, i.e. is a command (script).
    pub is_command: bool,
}

impl ComponentExports {
    pub fn function(&self, name: &str) -> Option<&ExportedFunction> {
        self.functions.iter().find(|f| f.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.functions.iter().map(|f| f.name.as_str()).collect()
    }
}

/// Reads the exported functions of a compiled component: top-level
/// functions and the functions of exported interfaces. `wasi:cli/run`
/// marks a command and is not a tool. `binary.rs` reads the same from a
/// component's bytes, without compiling it.
///
/// A function whose types exceed the host's bounds refuses the whole
/// component, naming the function: serving the rest would hide a component
/// built to exhaust whoever lists its tools.
pub fn read_exports(engine: &Engine, component: &Component) -> Result<ComponentExports, String> {
    let ty = component.component_type();
    let mut found: Vec<Found> = Vec::new();
    let mut is_command = false;
    for (name, item) in ty.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(func) => {
                found.push((None, name.to_string(), signature(&func)));
            }
            ComponentItem::ComponentInstance(instance) => {
                if name.starts_with("wasi:cli/run@") {
                    is_command = true;
                    continue;
                }
                for (fname, fitem) in instance.exports(engine) {
                    if let ComponentItem::ComponentFunc(func) = fitem.ty {
                        found.push((Some(name.to_string()), fname.to_string(), signature(&func)));
                    }
                }
            }
            _ => {}
        }
    }
    assemble(found, is_command)
}

/// Where a compiled component exports `function`: a key valid for every
/// instance of it.
pub fn export_index(
    component: &Component,
    function: &ExportedFunction,
) -> Option<ComponentExportIndex> {
    let parent = function
        .interface
        .as_deref()
        .and_then(|i| component.get_export_index(None, i));
    component.get_export_index(parent.as_ref(), &function.function)
}

/// One exported function as a reader found it: its interface, its name,
/// and its signature or why it cannot be a tool.
pub(super) type Found = (
    Option<String>,
    String,
    Result<Signature, (String, Unsupported)>,
);

/// The exports both readers found, named and checked the same way: tool
/// names (`<interface>-<function>` where two interfaces export the same
/// name), the type bound, the schema size bound, the order.
pub(super) fn assemble(found: Vec<Found>, is_command: bool) -> Result<ComponentExports, String> {
    let mut out = ComponentExports {
        is_command,
        ..ComponentExports::default()
    };
    for (interface, function, signature) in &found {
        let clashes = found.iter().filter(|(_, f, _)| f == function).count() > 1;
        let name = match interface {
            Some(iface) if clashes => format!("{}-{function}", short_interface(iface)),
            _ => function.clone(),
        };
        match signature {
            Err((reason, Unsupported::TooLarge)) => {
                return Err(format!("function `{name}`: {reason}"));
            }
            Ok((params, result)) => out.functions.push(ExportedFunction {
                name,
                interface: interface.clone(),
                function: function.clone(),
                params: params.clone(),
                result: result.clone(),
            }),
            Err((reason, _)) => out.skipped.push(SkippedExport {
                name,
                reason: reason.clone(),
            }),
        }
    }
    for f in &out.functions {
        let size = serde_json::to_vec(&f.input_schema()).map_or(usize::MAX, |v| v.len());
        if size > MAX_SCHEMA_BYTES {
            return Err(format!(
                "function `{}` has an input schema of {size} bytes, over the {MAX_SCHEMA_BYTES}-byte bound; simplify its types",
                f.name
            ));
        }
    }
    out.functions.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(super) type Signature = (Vec<(String, WitType)>, Option<WitType>);

fn signature(func: &ComponentFunc) -> Result<Signature, (String, Unsupported)> {
    if func.async_() {
        return Err((
            "is an async function, which this host does not call yet".into(),
            Unsupported::Kind {
                kind: "async function",
            },
        ));
    }
    // One budget for the whole signature, so many medium parameters cannot
    // add up to a huge schema either.
    let mut budget = TypeBudget::default();
    let params = func
        .params()
        .map(|(name, ty)| {
            WitType::from_component_within(&ty, &mut budget)
                .map(|t| (name.to_string(), t))
                .map_err(|e| (format!("its parameter `{name}` {e}"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut results = func.results();
    let result = match results.next() {
        None => None,
        Some(ty) => Some(
            WitType::from_component_within(&ty, &mut budget)
                .map_err(|e| (format!("its result {e}"), e))?,
        ),
    };
    Ok((params, result))
}

/// `pkg:ns/lines@1.0.0` -> `lines`.
fn short_interface(iface: &str) -> &str {
    let after_slash = iface.rsplit('/').next().unwrap_or(iface);
    after_slash.split('@').next().unwrap_or(after_slash)
}

#[cfg(test)]
mod tests {
    use super::short_interface;

    #[test]
    fn short_interface_drops_package_and_version() {
        assert_eq!(short_interface("skillbox:text/lines@0.1.0"), "lines");
        assert_eq!(short_interface("lines"), "lines");
    }
}
