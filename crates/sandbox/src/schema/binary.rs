//! A component's exported functions and their types, read from its bytes
//! without compiling it.
//!
//! Compiling takes from a few hundred milliseconds to tens of seconds (a
//! componentize-py tool carries a whole interpreter), but a tool's schema
//! needs only the component's type information, which the binary states
//! up front. The sections are parsed and validated with wasmparser, the
//! parser wasmtime itself uses; the core modules' function bodies are
//! skipped here and validated when the component is compiled.

use wasmparser::component_types::{
    ComponentDefinedType, ComponentEntityType, ComponentFuncType, ComponentValType,
};
use wasmparser::types::TypesRef;
use wasmparser::{Parser, Payload, PrimitiveValType, Validator, WasmFeatures};

use super::exports::{ComponentExports, Found, Signature, assemble};
use super::wit::{TypeBudget, Unsupported, WitType};

/// The exported functions of the component in `bytes`, as
/// [`super::read_exports`] reads them from a compiled one.
pub fn read_exports_from_binary(bytes: &[u8]) -> Result<ComponentExports, String> {
    let mut validator = Validator::new_with_features(WasmFeatures::all());
    let mut depth = 0usize;
    let mut export_names = Vec::new();
    let mut types = None;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("it is not a valid component: {e}"))?;
        if let Payload::ComponentExportSection(section) = &payload
            && depth == 0
        {
            for export in section.clone() {
                let export = export.map_err(|e| format!("it is not a valid component: {e}"))?;
                export_names.push(export.name.name.to_string());
            }
        }
        match &payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
        let valid = validator
            .payload(&payload)
            .map_err(|e| format!("it is not a valid component: {e}"))?;
        // Function bodies are validated when the component is compiled.
        if let wasmparser::ValidPayload::End(done) = valid
            && depth == 0
        {
            types = Some(done);
        }
    }
    let types = types.ok_or("it is not a complete component")?;
    let types = types.as_ref();
    let mut found: Vec<Found> = Vec::new();
    let mut is_command = false;
    for name in &export_names {
        let Some(item) = types.component_item_for_export(name) else {
            continue;
        };
        match item.ty {
            ComponentEntityType::Func(id) => {
                found.push((None, name.clone(), signature(types, &types[id])));
            }
            ComponentEntityType::Instance(id) => {
                if name.starts_with("wasi:cli/run@") {
                    is_command = true;
                    continue;
                }
                for (function, entry) in &types[id].exports {
                    if let ComponentEntityType::Func(fid) = entry.ty {
                        let sig = signature(types, &types[fid]);
                        found.push((Some(name.clone()), function.clone(), sig));
                    }
                }
            }
            _ => {}
        }
    }
    assemble(found, is_command)
}

fn signature(
    types: TypesRef<'_>,
    func: &ComponentFuncType,
) -> Result<Signature, (String, Unsupported)> {
    if func.async_ {
        return Err((
            "is an async function, which this host does not call yet".into(),
            Unsupported::Kind {
                kind: "async function",
            },
        ));
    }
    let mut budget = TypeBudget::default();
    let params = func
        .params
        .iter()
        .map(|(name, ty)| {
            copy(types, ty, &mut budget, 0)
                .map(|t| (name.to_string(), t))
                .map_err(|e| (format!("its parameter `{name}` {e}"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let result = match &func.result {
        None => None,
        Some(ty) => {
            Some(copy(types, ty, &mut budget, 0).map_err(|e| (format!("its result {e}"), e))?)
        }
    };
    Ok((params, result))
}

/// The same copy `WitType::from_component_within` makes of a compiled
/// component's types, under the same budget.
fn copy(
    types: TypesRef<'_>,
    ty: &ComponentValType,
    budget: &mut TypeBudget,
    depth: usize,
) -> Result<WitType, Unsupported> {
    budget.spend(depth)?;
    let d = depth + 1;
    let id = match ty {
        ComponentValType::Primitive(p) => return primitive(*p),
        ComponentValType::Type(id) => *id,
    };
    let boxed =
        |t: &ComponentValType, budget: &mut TypeBudget| copy(types, t, budget, d).map(Box::new);
    let kind = |kind: &'static str| Unsupported::Kind { kind };
    Ok(match &types[id] {
        ComponentDefinedType::Primitive(p) => primitive(*p)?,
        ComponentDefinedType::Record(record) => WitType::Record(
            record
                .fields
                .iter()
                .map(|(name, t)| Ok((name.to_string(), copy(types, t, budget, d)?)))
                .collect::<Result<_, Unsupported>>()?,
        ),
        ComponentDefinedType::Variant(variant) => WitType::Variant(
            variant
                .cases
                .iter()
                .map(|(name, case)| {
                    let payload = match &case.ty {
                        Some(t) => Some(copy(types, t, budget, d)?),
                        None => None,
                    };
                    Ok((name.to_string(), payload))
                })
                .collect::<Result<_, Unsupported>>()?,
        ),
        ComponentDefinedType::List { element, .. } => WitType::List(boxed(element, budget)?),
        ComponentDefinedType::FixedLengthList {
            element, length, ..
        } => WitType::FixedList(boxed(element, budget)?, *length),
        ComponentDefinedType::Tuple(tuple) => WitType::Tuple(
            tuple
                .types
                .iter()
                .map(|t| copy(types, t, budget, d))
                .collect::<Result<_, _>>()?,
        ),
        ComponentDefinedType::Flags(names) => {
            WitType::Flags(names.iter().map(|n| n.to_string()).collect())
        }
        ComponentDefinedType::Enum(names) => {
            WitType::Enum(names.iter().map(|n| n.to_string()).collect())
        }
        ComponentDefinedType::Option { ty, .. } => WitType::Option(boxed(ty, budget)?),
        ComponentDefinedType::Result { ok, err, .. } => WitType::Result {
            ok: match ok {
                Some(t) => Some(boxed(t, budget)?),
                None => None,
            },
            err: match err {
                Some(t) => Some(boxed(t, budget)?),
                None => None,
            },
        },
        ComponentDefinedType::Own(_) | ComponentDefinedType::Borrow(_) => {
            return Err(kind("resource"));
        }
        ComponentDefinedType::Map { .. } => return Err(kind("map")),
        ComponentDefinedType::Future { .. } => return Err(kind("future")),
        ComponentDefinedType::Stream { .. } => return Err(kind("stream")),
    })
}

fn primitive(p: PrimitiveValType) -> Result<WitType, Unsupported> {
    Ok(match p {
        PrimitiveValType::Bool => WitType::Bool,
        PrimitiveValType::S8 => WitType::S8,
        PrimitiveValType::U8 => WitType::U8,
        PrimitiveValType::S16 => WitType::S16,
        PrimitiveValType::U16 => WitType::U16,
        PrimitiveValType::S32 => WitType::S32,
        PrimitiveValType::U32 => WitType::U32,
        PrimitiveValType::S64 => WitType::S64,
        PrimitiveValType::U64 => WitType::U64,
        PrimitiveValType::F32 => WitType::F32,
        PrimitiveValType::F64 => WitType::F64,
        PrimitiveValType::Char => WitType::Char,
        PrimitiveValType::String => WitType::String,
        PrimitiveValType::ErrorContext => {
            return Err(Unsupported::Kind {
                kind: "error-context",
            });
        }
    })
}
