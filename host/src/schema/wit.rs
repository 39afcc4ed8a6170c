//! An owned copy of a component's interface types.
//!
//! wasmtime's `Type` handles borrow from a loaded component. Copying them
//! into a plain tree once, at load time, lets schema derivation, validation
//! and conversion run without the engine, and makes them testable with
//! generated types.

use wasmtime::component::types::Type;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitType {
    Bool,
    S8,
    U8,
    S16,
    U16,
    S32,
    U32,
    S64,
    U64,
    F32,
    F64,
    Char,
    String,
    List(Box<WitType>),
    FixedList(Box<WitType>, u32),
    Record(Vec<(String, WitType)>),
    Tuple(Vec<WitType>),
    Variant(Vec<(String, Option<WitType>)>),
    Enum(Vec<String>),
    Option(Box<WitType>),
    Result {
        ok: Option<Box<WitType>>,
        err: Option<Box<WitType>>,
    },
    Flags(Vec<String>),
}

/// A type a JSON tool interface cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("uses a {kind}, which cannot be passed as JSON")]
pub struct Unsupported {
    pub kind: &'static str,
}

impl WitType {
    /// Copies a component type, or says which part of it has no JSON form.
    pub fn from_component(ty: &Type) -> Result<Self, Unsupported> {
        let boxed = |t: &Type| WitType::from_component(t).map(Box::new);
        Ok(match ty {
            Type::Bool => WitType::Bool,
            Type::S8 => WitType::S8,
            Type::U8 => WitType::U8,
            Type::S16 => WitType::S16,
            Type::U16 => WitType::U16,
            Type::S32 => WitType::S32,
            Type::U32 => WitType::U32,
            Type::S64 => WitType::S64,
            Type::U64 => WitType::U64,
            Type::Float32 => WitType::F32,
            Type::Float64 => WitType::F64,
            Type::Char => WitType::Char,
            Type::String => WitType::String,
            Type::List(list) => WitType::List(boxed(&list.ty())?),
            Type::FixedLengthList(list) => WitType::FixedList(boxed(&list.ty())?, list.len()),
            Type::Record(record) => WitType::Record(
                record
                    .fields()
                    .map(|f| Ok((f.name.to_string(), WitType::from_component(&f.ty)?)))
                    .collect::<Result<_, Unsupported>>()?,
            ),
            Type::Tuple(tuple) => WitType::Tuple(
                tuple
                    .types()
                    .map(|t| WitType::from_component(&t))
                    .collect::<Result<_, _>>()?,
            ),
            Type::Variant(variant) => WitType::Variant(
                variant
                    .cases()
                    .map(|c| {
                        let payload = c.ty.as_ref().map(WitType::from_component).transpose()?;
                        Ok((c.name.to_string(), payload))
                    })
                    .collect::<Result<_, Unsupported>>()?,
            ),
            Type::Enum(e) => WitType::Enum(e.names().map(str::to_string).collect()),
            Type::Option(o) => WitType::Option(boxed(&o.ty())?),
            Type::Result(r) => WitType::Result {
                ok: r.ok().as_ref().map(boxed).transpose()?,
                err: r.err().as_ref().map(boxed).transpose()?,
            },
            Type::Flags(f) => WitType::Flags(f.names().map(str::to_string).collect()),
            Type::Own(_) | Type::Borrow(_) => return Err(Unsupported { kind: "resource" }),
            Type::Map(_) => return Err(Unsupported { kind: "map" }),
            Type::Future(_) => return Err(Unsupported { kind: "future" }),
            Type::Stream(_) => return Err(Unsupported { kind: "stream" }),
            Type::ErrorContext => {
                return Err(Unsupported {
                    kind: "error-context",
                });
            }
        })
    }

    /// A short WIT-like spelling, used in error messages.
    pub fn describe(&self) -> String {
        match self {
            WitType::Bool => "bool".into(),
            WitType::S8 => "s8".into(),
            WitType::U8 => "u8".into(),
            WitType::S16 => "s16".into(),
            WitType::U16 => "u16".into(),
            WitType::S32 => "s32".into(),
            WitType::U32 => "u32".into(),
            WitType::S64 => "s64".into(),
            WitType::U64 => "u64".into(),
            WitType::F32 => "f32".into(),
            WitType::F64 => "f64".into(),
            WitType::Char => "char".into(),
            WitType::String => "string".into(),
            WitType::List(t) => format!("list<{}>", t.describe()),
            WitType::FixedList(t, n) => format!("list<{}, {n}>", t.describe()),
            WitType::Record(_) => "record (object)".into(),
            WitType::Tuple(ts) => format!("tuple of {}", ts.len()),
            WitType::Variant(_) => "variant".into(),
            WitType::Enum(_) => "enum".into(),
            WitType::Option(t) => format!("option<{}>", t.describe()),
            WitType::Result { .. } => "result".into(),
            WitType::Flags(_) => "flags".into(),
        }
    }

    /// The integer range of an integer type, as i128 so every bound fits.
    pub fn integer_range(&self) -> Option<(i128, i128)> {
        Some(match self {
            WitType::S8 => (i8::MIN.into(), i8::MAX.into()),
            WitType::U8 => (0, u8::MAX.into()),
            WitType::S16 => (i16::MIN.into(), i16::MAX.into()),
            WitType::U16 => (0, u16::MAX.into()),
            WitType::S32 => (i32::MIN.into(), i32::MAX.into()),
            WitType::U32 => (0, u32::MAX.into()),
            WitType::S64 => (i64::MIN.into(), i64::MAX.into()),
            WitType::U64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }

    /// Whether JSON `null` is already a value of this type, which decides
    /// how an enclosing `option` must spell `some`.
    pub fn admits_null(&self) -> bool {
        matches!(self, WitType::Option(_))
    }
}
