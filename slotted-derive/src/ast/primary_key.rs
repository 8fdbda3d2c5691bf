//! The model's primary key: its fields by Diesel's rule, and what each key type is known to
//! be by its name, for the errors the derive can give before the type system does.

use proc_macro2::Span;
use syn::{DeriveInput, Ident, Type};

use crate::attr;
use crate::errors::Errors;

/// One field of the model's primary key.
pub struct KeyField<'a> {
    pub ident: &'a Ident,
    /// Its column in the model's table.
    pub column: Ident,
    /// Its type, as written.
    pub ty: &'a Type,
    pub key: KeyType,
}

/// The most fields a composite key has: keep in step with `slotted_core::MAX_KEY_COLUMNS`.
pub const MAX_KEY_COLUMNS: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    I16,
    I32,
    I64,
    U32,
    U64,
    String,
    /// `uuid::Uuid` (checked to be it by its SQL type).
    Uuid,
    /// `chrono::NaiveDate` (checked to be it by its SQL type).
    Date,
    /// Any other type: a newtype with `#[derive(SlottedKey)]`, or a type that keys nothing,
    /// which the type system refuses at the field.
    Other,
}

impl KeyType {
    /// Its Diesel SQL type, by name (in scope in a `table!`); `None` for a type not known by
    /// name, whose column is `slotted_core::KeyOf<Key>`.
    pub fn sql_type(self) -> Option<&'static str> {
        Some(match self {
            KeyType::I16 => "SmallInt",
            KeyType::I32 => "Integer",
            KeyType::I64 => "BigInt",
            KeyType::U32 => "Unsigned<Integer>",
            KeyType::U64 => "Unsigned<BigInt>",
            KeyType::String => "Text",
            KeyType::Uuid => "Uuid",
            KeyType::Date => "Date",
            KeyType::Other => return None,
        })
    }

    /// Whether the shared table's BIGINT `record_id` is known not to hold it (a type not known
    /// by name is checked by the type system).
    pub(super) fn refused_by_shared(self) -> bool {
        matches!(
            self,
            KeyType::String | KeyType::U64 | KeyType::Uuid | KeyType::Date
        )
    }

    /// For a type known by name only (`Uuid`, `NaiveDate`, which a type of the user's may be
    /// called too): the `KeyKind` it must key, by its variant's name.
    pub fn kind_by_name(self) -> Option<&'static str> {
        match self {
            KeyType::Uuid => Some("Uuid"),
            KeyType::Date => Some("Date"),
            _ => None,
        }
    }

    /// The slotted-core feature without which a type of this name keys no counter.
    pub fn feature(self) -> Option<&'static str> {
        match self {
            KeyType::Uuid => Some("uuid"),
            KeyType::Date => Some("chrono"),
            _ => None,
        }
    }
}

/// The primary-key fields, by Diesel's rule: `#[diesel(primary_key(…))]`, else `id`.
pub(super) fn key_field<'a>(
    input: &'a DeriveInput,
    fields: &'a syn::FieldsNamed,
    diesel: &attr::DieselAttrs,
    errors: &mut Errors,
) -> Option<Vec<KeyField<'a>>> {
    let names: Vec<(String, Option<Span>)> = match &diesel.primary_key {
        Some((keys, span)) if keys.len() > MAX_KEY_COLUMNS => {
            errors.push(syn::Error::new(
                *span,
                format!(
                    "slotted counters support composite primary keys of up to {MAX_KEY_COLUMNS} columns\n\n\
                     help: key the model by fewer columns, e.g. a surrogate `id`"
                ),
            ));
            return None;
        }
        Some((keys, span)) if keys.is_empty() => {
            errors.push(syn::Error::new(
                *span,
                "`primary_key()` names no column\n\nhelp: `#[diesel(primary_key(id))]`",
            ));
            return None;
        }
        Some((keys, _)) => keys
            .iter()
            .map(|key| (key.to_string(), Some(key.span())))
            .collect(),
        None => vec![("id".to_owned(), None)],
    };
    let mut found = Vec::new();
    for (name, span) in names {
        let Some(field) = fields
            .named
            .iter()
            .find(|f| f.ident.as_ref().is_some_and(|i| *i == name))
        else {
            let message = format!("`{}` has no field `{name}`, its primary key", input.ident);
            match span {
                Some(span) => errors.push(syn::Error::new(
                    span,
                    format!("{message}\n\nhelp: name an existing field in `#[diesel(primary_key(…))]`"),
                )),
                None => errors.at(
                    &input.ident,
                    format_args!("{message} by Diesel's default"),
                    "add an `id` field, or name the key field with `#[diesel(primary_key(post_id))]`",
                ),
            }
            continue;
        };
        let Some(ident) = field.ident.as_ref() else {
            continue;
        };
        if let Type::Tuple(tuple) = &field.ty {
            errors.at(
                tuple,
                format_args!("the primary key field `{ident}` is a tuple, which no column holds"),
                "a composite key is a field per column, each named in `#[diesel(primary_key(a, b))]`",
            );
            continue;
        }
        found.push(KeyField {
            ident,
            column: attr::column_name(&field.attrs).unwrap_or_else(|| ident.clone()),
            ty: &field.ty,
            key: key_type(&field.ty),
        });
    }
    let expected = diesel
        .primary_key
        .as_ref()
        .map_or(1, |(keys, _)| keys.len());
    (found.len() == expected).then_some(found)
}

/// What the key's type is known to be by its name, for the errors the derive can give at once;
/// the type system checks every key, known by name or not (`impl CounterKey`).
pub(crate) fn key_type(ty: &Type) -> KeyType {
    let Type::Path(path) = ty else {
        return KeyType::Other;
    };
    let Some(last) = path.path.segments.last() else {
        return KeyType::Other;
    };
    if path.qself.is_some() || !last.arguments.is_empty() {
        return KeyType::Other;
    }
    match last.ident.to_string().as_str() {
        "i16" => KeyType::I16,
        "i32" => KeyType::I32,
        "i64" => KeyType::I64,
        "u32" => KeyType::U32,
        "u64" => KeyType::U64,
        "String" => KeyType::String,
        "Uuid" => KeyType::Uuid,
        "NaiveDate" => KeyType::Date,
        _ => KeyType::Other,
    }
}
