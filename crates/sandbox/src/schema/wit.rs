//! An owned copy of a component's interface types.
//!
//! wasmtime's `Type` handles borrow from a loaded component, and
//! wasmparser's from a parsed binary (`binary.rs`). Copying either into a
//! plain tree, under one budget, lets schema derivation, validation and
//! conversion run without the engine, gives both readers the same result,
//! and makes them testable with generated types.

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

/// Why a component type cannot become a tool's JSON type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("uses a {kind}, which cannot be passed as JSON")]
    Kind { kind: &'static str },
    /// Component types are shared graphs; copied into a tree (and into a
    /// JSON Schema) a small component can name an exponentially large type.
    #[error(
        "has a type larger than this host accepts (more than {MAX_TYPE_NODES} type nodes \
         or nesting deeper than {MAX_TYPE_DEPTH}); simplify the function's types"
    )]
    TooLarge,
}

/// Type nodes one function's parameters and result may have in all.
pub const MAX_TYPE_NODES: usize = 4096;
/// How deeply a parameter's or result's type may nest.
pub const MAX_TYPE_DEPTH: usize = 32;

/// What is left of a function's type budget while its types are copied.
#[derive(Debug)]
pub struct TypeBudget {
    nodes_left: usize,
}

impl Default for TypeBudget {
    fn default() -> Self {
        TypeBudget {
            nodes_left: MAX_TYPE_NODES,
        }
    }
}

impl TypeBudget {
    /// Spends one node at `depth`, or says the type is too large.
    pub(super) fn spend(&mut self, depth: usize) -> Result<(), Unsupported> {
        if depth > MAX_TYPE_DEPTH || self.nodes_left == 0 {
            return Err(Unsupported::TooLarge);
        }
        self.nodes_left -= 1;
        Ok(())
    }
}

fn unsupported(kind: &'static str) -> Unsupported {
    Unsupported::Kind { kind }
}

impl WitType {
    /// Copies a component type, or says which part of it has no JSON form,
    /// under a fresh budget.
    pub fn from_component(ty: &Type) -> Result<Self, Unsupported> {
        Self::from_component_within(ty, &mut TypeBudget::default())
    }

    /// Copies a component type, spending `budget`: every node copied costs
    /// one, so a type graph that would unfold into a huge tree stops early.
    pub fn from_component_within(ty: &Type, budget: &mut TypeBudget) -> Result<Self, Unsupported> {
        Self::copy(ty, budget, 0)
    }

    fn copy(ty: &Type, budget: &mut TypeBudget, depth: usize) -> Result<Self, Unsupported> {
        budget.spend(depth)?;
        let d = depth + 1;
        let boxed = |t: &Type, budget: &mut TypeBudget| Self::copy(t, budget, d).map(Box::new);
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
            Type::List(list) => WitType::List(boxed(&list.ty(), budget)?),
            Type::FixedLengthList(list) => {
                WitType::FixedList(boxed(&list.ty(), budget)?, list.len())
            }
            Type::Record(record) => WitType::Record(
                record
                    .fields()
                    .map(|f| Ok((f.name.to_string(), Self::copy(&f.ty, budget, d)?)))
                    .collect::<Result<_, Unsupported>>()?,
            ),
            Type::Tuple(tuple) => WitType::Tuple(
                tuple
                    .types()
                    .map(|t| Self::copy(&t, budget, d))
                    .collect::<Result<_, _>>()?,
            ),
            Type::Variant(variant) => WitType::Variant(
                variant
                    .cases()
                    .map(|c| {
                        let payload = match c.ty.as_ref() {
                            Some(t) => Some(Self::copy(t, budget, d)?),
                            None => None,
                        };
                        Ok((c.name.to_string(), payload))
                    })
                    .collect::<Result<_, Unsupported>>()?,
            ),
            Type::Enum(e) => WitType::Enum(e.names().map(str::to_string).collect()),
            Type::Option(o) => WitType::Option(boxed(&o.ty(), budget)?),
            Type::Result(r) => WitType::Result {
                ok: match r.ok() {
                    Some(t) => Some(boxed(&t, budget)?),
                    None => None,
                },
                err: match r.err() {
                    Some(t) => Some(boxed(&t, budget)?),
                    None => None,
                },
            },
            Type::Flags(f) => WitType::Flags(f.names().map(str::to_string).collect()),
            Type::Own(_) | Type::Borrow(_) => return Err(unsupported("resource")),
            Type::Map(_) => return Err(unsupported("map")),
            Type::Future(_) => return Err(unsupported("future")),
            Type::Stream(_) => return Err(unsupported("stream")),
            Type::ErrorContext => return Err(unsupported("error-context")),
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
