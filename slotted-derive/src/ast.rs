//! The checked model: what `expand` generates code from. Built when every attribute and the
//! struct itself are valid; otherwise every problem comes back at once, with a fallback model
//! of what could still be declared.

use std::collections::HashMap;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::{Data, DeriveInput, Fields, Ident, LitInt, Path, Type, Visibility};

use crate::attr::{self, CounterAttr, COUNTER_FORM};
use crate::errors::Errors;

/// Keep in step with `slotted_core::MAX_SLOTS` (the core's tests check it).
pub const MAX_SLOTS: u16 = 1024;
/// Keep in step with `slotted_core::DEFAULT_MAX_KEY_LENGTH`, `MAX_KEY_LENGTH` and
/// `MAX_BUCKETED_KEY_LENGTH` (the expansion snapshot `string_key` shows them beside each other).
pub const DEFAULT_MAX_KEY_LENGTH: u16 = 255;
/// InnoDB indexes at most 3,072 bytes a key: `VARCHAR(n)` in `utf8mb4` counts 4n, `slot` 2 and
/// `bucket` 8 (measured on MariaDB 10.11: 767 and 765 migrate, 768 and 766 do not).
pub const MAX_KEY_LENGTH: u16 = 767;
pub const MAX_BUCKETED_KEY_LENGTH: u16 = 765;
/// PostgreSQL cuts identifiers at 63 bytes, MySQL refuses more than 64.
const MAX_TABLE_NAME: usize = 63;

pub struct Model<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    /// The Diesel table of the model, as a path (for cache columns).
    pub parent: Path,
    /// Whether `parent` is Diesel's default name (no `#[diesel(table_name = …)]`), which the
    /// expansion looks up so that a missing table is one error naming `table_name`.
    pub parent_by_default: bool,
    /// The primary key's fields: one, or two or three for a composite key
    /// (`#[diesel(primary_key(a, b))]`), in the key's order.
    pub keys: Vec<KeyField<'a>>,
    /// The key's type: the key field's type as written, or a tuple of them for a composite key,
    /// spanned at the `primary_key(…)` list (where the type system reports a column that keys
    /// nothing).
    pub key_ty: Type,
    pub counters: Vec<Counter>,
    pub krate: Path,
}

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
    fn refused_by_shared(self) -> bool {
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

pub struct Counter {
    pub name: Ident,
    pub slots: u16,
    pub table: Ident,
    pub max_key_length: u16,
    /// Where `max_key_length` was given: a key not known by name is checked there to be text.
    pub max_key_length_at: Option<Span>,
    /// Where `storage = shared` was given: a key not known by name is checked there to fit.
    pub shared_at: Option<Span>,
    pub strategy: Strategy,
    pub bucket: Option<Bucket>,
    pub prefill: bool,
    /// The cache column in the model's table.
    pub cache: Option<Ident>,
    /// The existing counter column of the model's table that the counter adopts.
    pub adopt: Option<Ident>,
    /// `storage = shared`: rows in `slotted_counters`; `table` is then a module name for the
    /// counter's marker type.
    pub shared: bool,
    /// `follow = comments(post_id)`: the child table whose rows the counter counts.
    pub follow: Option<crate::follow::Follow>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Hour,
    Day,
}

/// `slotted_core::SlotStrategy`'s variants.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Thread,
    Random,
    Connection,
}

/// A derive input with mistakes: every error, and what can still be declared, so that the
/// model's uses elsewhere compile and the user sees the mistakes alone, not a cascade of "no
/// method `likes`" at every call (as thiserror and serde do).
pub struct Invalid<'a> {
    pub errors: syn::Error,
    /// `None` when the struct itself cannot carry the methods (an enum, a generic struct…).
    pub fallback: Option<Box<Fallback<'a>>>,
}

/// What the derive still declares beside its errors.
pub struct Fallback<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    pub krate: Path,
    /// The model with the counters whose name and table are sound and unique, a bad value
    /// replaced by its default; `None` when the model's key is unusable.
    pub model: Option<Model<'a>>,
    /// The counters named by an attribute that cannot be declared (its syntax, table or the
    /// model's key is broken): their three methods, as stubs on `slotted_core`'s
    /// `InvalidCounter`, which accept any call the real ones would.
    pub stubs: Vec<Ident>,
}

impl<'a> Model<'a> {
    pub fn from_syn(input: &'a DeriveInput) -> Result<Self, Invalid<'a>> {
        let mut errors = Errors::default();
        let fields = struct_fields(input, &mut errors);
        if !input.generics.params.is_empty() {
            errors.at(
                &input.generics,
                "#[derive(SlottedCounter)] does not support generic structs",
                "derive it on a concrete model struct: a Diesel model maps one table",
            );
        }
        let diesel = attr::parse_diesel(&input.attrs);
        let reported = errors.len();
        let slotted = attr::parse_slotted(&input.attrs, &mut errors);
        // No counter and nothing reported: no #[slotted] at all, or only `crate = …`.
        if slotted.counters.is_empty() && errors.len() == reported {
            errors.at(
                &input.ident,
                "#[derive(SlottedCounter)] needs at least one #[slotted(counter = …, slots = …)] attribute",
                COUNTER_FORM,
            );
        }
        let key = fields.and_then(|fields| key_field(input, fields, &diesel, &mut errors));
        let parent: Path = match &diesel.table_name {
            Some(path) => path.clone(),
            None => {
                let inferred = infer_table_name(&input.ident.unraw().to_string());
                match ident(&inferred, input.ident.span()) {
                    Some(table) => table.into(),
                    None => {
                        errors.at(
                            &input.ident,
                            format_args!("`{inferred}`, Diesel's default table name for `{}`, is not an identifier", input.ident),
                            "name the model's table: `#[diesel(table_name = posts)]`",
                        );
                        input.ident.clone().into()
                    }
                }
            }
        };
        // The SQL name: `r#match` is the table `match`.
        let parent_table = parent
            .segments
            .last()
            .map(|s| s.ident.unraw().to_string())
            .unwrap_or_default();
        let mut counters = Vec::new();
        let mut stubs = Vec::new();
        let kinds: Option<Vec<KeyType>> = key.as_ref().map(|k| k.iter().map(|f| f.key).collect());
        for attr in &slotted.counters {
            match counter(attr, &parent_table, kinds.as_deref(), &mut errors) {
                Ok(counter) => counters.push(counter),
                Err(name) => stubs.extend(name),
            }
        }
        let clashing = check_collisions(&counters, &mut errors);
        let krate = slotted
            .krate
            .unwrap_or_else(|| syn::parse_quote!(::slotted_core));
        let (model, stubs) = match key {
            Some(keys) => {
                let key_ty = match &keys[..] {
                    [one] => one.ty.clone(),
                    many => {
                        let types = many.iter().map(|k| k.ty);
                        let span = diesel
                            .primary_key
                            .as_ref()
                            .map_or(Span::call_site(), |p| p.1);
                        let tuple = quote::quote_spanned!(span=> (#(#types,)*));
                        syn::parse2(crate::expand::respan(&tuple, span))
                            .expect("a tuple of the key fields' types")
                    }
                };
                let model = Model {
                    ident: &input.ident,
                    vis: &input.vis,
                    parent,
                    parent_by_default: diesel.table_name.is_none(),
                    keys,
                    key_ty,
                    counters,
                    krate: krate.clone(),
                };
                (Some(model), stubs)
            }
            // No key, no counter table: every counter the attributes name is a stub.
            None => {
                let names = counters.into_iter().map(|c| c.name);
                (None, names.chain(stubs).collect())
            }
        };
        match (errors.finish(), model) {
            (Ok(()), Some(model)) => Ok(model),
            (Ok(()), None) => Err(Invalid {
                errors: syn::Error::new(Span::call_site(), "unreachable: no key and no error"),
                fallback: None,
            }),
            (Err(errors), mut model) => {
                if let Some(model) = &mut model {
                    let mut index = 0;
                    model.counters.retain(|_| {
                        index += 1;
                        !clashing.contains(&(index - 1))
                    });
                }
                let stubs = distinct_stubs(model.as_ref(), stubs);
                let declarable = fields.is_some() && input.generics.params.is_empty();
                Err(Invalid {
                    errors,
                    fallback: declarable.then(|| {
                        Box::new(Fallback {
                            ident: &input.ident,
                            vis: &input.vis,
                            krate,
                            model,
                            stubs,
                        })
                    }),
                })
            }
        }
    }
}

/// The stubs whose methods no declared counter or earlier stub generates already.
fn distinct_stubs(model: Option<&Model<'_>>, stubs: Vec<Ident>) -> Vec<Ident> {
    let methods = |name: &Ident| {
        let name = name.to_string();
        [format!("{name}_of"), format!("{name}_totals"), name]
    };
    let mut taken: Vec<String> = model
        .into_iter()
        .flat_map(|m| &m.counters)
        .flat_map(|c| methods(&c.name))
        .collect();
    stubs
        .into_iter()
        .filter(|stub| {
            let mine = methods(stub);
            let free = !mine.iter().any(|m| taken.contains(m));
            taken.extend(mine);
            free
        })
        .collect()
}

fn struct_fields<'a>(input: &'a DeriveInput, errors: &mut Errors) -> Option<&'a syn::FieldsNamed> {
    let help = "derive it on the struct of a Diesel model, with named fields: `struct Post { id: i32, … }`";
    match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(fields) => return Some(fields),
            Fields::Unnamed(fields) => errors.at(
                fields,
                "#[derive(SlottedCounter)] does not support tuple structs",
                help,
            ),
            Fields::Unit => errors.at(
                &input.ident,
                "#[derive(SlottedCounter)] does not support unit structs",
                help,
            ),
        },
        Data::Enum(e) => errors.at(
            e.enum_token,
            "#[derive(SlottedCounter)] does not support enums",
            help,
        ),
        Data::Union(u) => errors.at(
            u.union_token,
            "#[derive(SlottedCounter)] does not support unions",
            help,
        ),
    }
    None
}

/// The primary-key fields, by Diesel's rule: `#[diesel(primary_key(…))]`, else `id`.
fn key_field<'a>(
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

/// The counter an attribute declares; or, when it cannot be declared, its name if that is a
/// sound method name (for a stub), and `None` if not.
fn counter(
    attr: &CounterAttr<'_>,
    parent_table: &str,
    key: Option<&[KeyType]>,
    errors: &mut Errors,
) -> Result<Counter, Option<Ident>> {
    // Its syntax error was reported; the rest of the attribute is unknown.
    if attr.broken {
        return Err(attr.counter.as_ref().filter(|n| is_plain_name(n)).cloned());
    }
    let name = match &attr.counter {
        Some(name) => checked_name(name, errors),
        None if attr.invalid => None,
        None => {
            errors.at(attr.attr, "missing `counter` in #[slotted]", COUNTER_FORM);
            None
        }
    };
    let slots = match &attr.slots {
        Some(lit) => checked_int(lit, "slots", 1, MAX_SLOTS, errors),
        None if attr.invalid => None,
        None => {
            errors.at(
                attr.attr,
                "missing `slots` in #[slotted]",
                "give the slot count: `#[slotted(counter = likes, slots = 16)]`; see the README on choosing it",
            );
            None
        }
    };
    let max_key_length = match &attr.max_key_length {
        Some(lit)
            if key.is_some_and(|k| {
                !k.iter()
                    .any(|k| matches!(k, KeyType::String | KeyType::Other))
            }) =>
        {
            errors.at(
                lit,
                "`max_key_length` applies only to `String` keys",
                "remove it: integer keys have a fixed size",
            );
            None
        }
        Some(lit) => checked_key_length(lit, attr.bucket.as_ref(), errors),
        None => Some(DEFAULT_MAX_KEY_LENGTH),
    };
    let strategy = match &attr.strategy {
        None => Some(Strategy::Connection),
        Some(s) if s == "thread" => Some(Strategy::Thread),
        Some(s) if s == "random" => Some(Strategy::Random),
        Some(s) if s == "connection" => Some(Strategy::Connection),
        Some(s) => {
            errors.at(
                s,
                format_args!("unknown slot strategy `{s}`"),
                "`strategy = connection` (the default: a slot per database connection, chosen by the \
                 server), `strategy = thread` (a slot per live thread) or `strategy = random`",
            );
            None
        }
    };
    let bucket = match &attr.bucket {
        None => Some(None),
        Some(b) if b == "day" => Some(Some(Bucket::Day)),
        Some(b) if b == "hour" => Some(Some(Bucket::Hour)),
        Some(b) => {
            errors.at(
                b,
                format_args!("unknown bucket `{b}`"),
                "`bucket = day` or `bucket = hour` (UTC)",
            );
            None
        }
    };
    let shared = match &attr.storage {
        None => Some(false),
        Some(s) if s == "table" => Some(false),
        Some(s) if s == "shared" => Some(true),
        Some(s) => {
            errors.at(
                s,
                format_args!("unknown storage `{s}`"),
                "`storage = table` (the default: a table per counter) or `storage = shared` (one `slotted_counters` table)",
            );
            None
        }
    };
    if shared == Some(true) {
        let storage = attr.storage.as_ref();
        if key.is_some_and(|k| k.len() > 1) {
            errors.at(
                storage,
                "shared storage keeps one key column: a composite key needs a table of its own",
                "remove `storage = shared` (the counter gets its own table, keyed by every column of the model's primary key)",
            );
        } else if key.is_some_and(|k| k.iter().copied().any(KeyType::refused_by_shared)) {
            errors.at(
                storage,
                "shared storage keeps integer keys of up to 63 bits only",
                "key the model by `i16`, `i32`, `i64` or `u32`, or use `storage = table`",
            );
        }
        if let Some(b) = &attr.bucket {
            errors.at(
                b,
                "bucketed counters need a table of their own",
                "remove `storage = shared`, or the `bucket`",
            );
        }
        if let Some(t) = &attr.table {
            errors.at(
                t,
                "shared counters live in the `slotted_counters` table",
                "remove `table = …`, or `storage = shared`",
            );
        }
    }
    if let (Some(a), Some(b)) = (&attr.adopt, &attr.bucket) {
        errors.at(
            a,
            "`adopt` does not combine with `bucket`: a bucketed counter starts afresh each bucket, and a column's counts have no bucket",
            format_args!("remove `bucket = {b}`, or adopt the column with a counter of its own"),
        );
    }
    if let (Some(p), Some(b)) = (&attr.prefill, &attr.bucket) {
        errors.at(
            p,
            "`prefill` does not combine with `bucket`: a new bucket starts with no rows",
            format_args!("remove `prefill`, or `bucket = {b}`"),
        );
    }
    // Reported when wrong; the counter is then declared as following nothing.
    let follow = crate::follow::checked(attr, key, errors).ok().flatten();
    let name = name.ok_or(None)?;
    let table = match &attr.table {
        Some(table) => checked_table(table, errors).ok_or_else(|| Some(name.clone()))?,
        None => {
            // Shared counters get a module for their marker type, named like a table.
            let suffix = if attr.storage.as_ref().is_some_and(|s| s == "shared") {
                ""
            } else {
                "_slots"
            };
            let text = format!("{parent_table}_{name}{suffix}");
            let Some(table) = ident(&text, name.span()) else {
                errors.at(
                    &name,
                    format_args!("the counter table name `{text}` is not an identifier"),
                    format_args!("name the table: `#[slotted(counter = {name}, slots = …, table = {name}_slots)]`"),
                );
                return Err(Some(name));
            };
            if text.len() > MAX_TABLE_NAME {
                errors.at(
                    &name,
                    format_args!("the counter table name `{table}` is longer than {MAX_TABLE_NAME} characters"),
                    format_args!("name a shorter table: `#[slotted(counter = {name}, slots = …, table = {name}_slots)]`"),
                );
                return Err(Some(name));
            }
            table
        }
    };
    // A bad value was reported above; its default keeps the counter in the fallback model.
    Ok(Counter {
        name,
        slots: slots.unwrap_or(1),
        table,
        max_key_length: max_key_length.unwrap_or(DEFAULT_MAX_KEY_LENGTH),
        max_key_length_at: attr.max_key_length.as_ref().map(syn::LitInt::span),
        shared_at: attr
            .storage
            .as_ref()
            .filter(|_| shared == Some(true))
            .map(Ident::span),
        strategy: strategy.unwrap_or(Strategy::Connection),
        bucket: bucket.flatten(),
        prefill: attr.prefill.is_some(),
        cache: attr.cache.clone(),
        adopt: attr.adopt.clone(),
        shared: shared.unwrap_or(false),
        follow,
    })
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "gen", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// A name `checked_name` accepts, checked without reporting.
fn is_plain_name(name: &Ident) -> bool {
    let text = name.to_string();
    !KEYWORDS.contains(&text.as_str())
        && !text.starts_with('_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn checked_name(name: &Ident, errors: &mut Errors) -> Option<Ident> {
    let text = name.to_string();
    let problem = if KEYWORDS.contains(&text.as_str()) {
        format!("counter name `{text}` is a Rust keyword")
    } else if text.starts_with("r#") {
        format!("counter name `{text}` is a raw identifier")
    } else if !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || text.starts_with('_')
    {
        format!(
            "counter name `{text}` must be ASCII letters, digits and `_`, not starting with `_`"
        )
    } else {
        return Some(name.clone());
    };
    errors.at(
        name,
        problem,
        "name the counter with a plain snake_case identifier, e.g. `counter = likes`",
    );
    None
}

fn checked_table(table: &Ident, errors: &mut Errors) -> Option<Ident> {
    let text = table.to_string();
    if text.starts_with("r#") || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        errors.at(
            table,
            format_args!("table name `{text}` must be ASCII letters, digits and `_`"),
            "e.g. `table = post_likes_slots`",
        );
        None
    } else if KEYWORDS.contains(&text.as_str()) || text == "_" {
        errors.at(
            table,
            format_args!("table name `{text}` is a Rust keyword"),
            "the table is also a Rust module, which a keyword cannot name; e.g. `table = post_likes_slots`",
        );
        None
    } else if text.len() > MAX_TABLE_NAME {
        errors.at(
            table,
            format_args!("table name `{text}` is longer than {MAX_TABLE_NAME} characters"),
            "PostgreSQL would cut it; choose a shorter name",
        );
        None
    } else {
        Some(table.clone())
    }
}

fn checked_int(lit: &LitInt, key: &str, min: u16, max: u16, errors: &mut Errors) -> Option<u16> {
    match lit.base10_parse::<u64>() {
        Ok(v) if (u64::from(min)..=u64::from(max)).contains(&v) => u16::try_from(v).ok(),
        // Out of range, negative (`-1`), or too large for u64.
        _ if key == "slots" => {
            errors.at(
                lit,
                format_args!("`slots` must be between {min} and {max}"),
                format_args!(
                    "a record's count is spread over 1 to {max} slot rows, and every read sums them; \
                     16 to 128 suits most hot counters"
                ),
            );
            None
        }
        _ => {
            errors.at(
                lit,
                format_args!("`{key}` must be between {min} and {max}"),
                format_args!(
                    "`{key}` takes an integer from {min} to {max}, e.g. `#[slotted(counter = views, slots = 16, {key} = {min})]`"
                ),
            );
            None
        }
    }
}

/// `max_key_length = N`: from 1 to the longest key MySQL/MariaDB can index in this counter's
/// primary key, which a `bucket` column shortens.
fn checked_key_length(lit: &LitInt, bucket: Option<&Ident>, errors: &mut Errors) -> Option<u16> {
    let (max, shape, bytes) = match bucket {
        None => (
            MAX_KEY_LENGTH,
            "`(record_id, slot)`",
            "`slot` takes 2 bytes",
        ),
        Some(_) => (
            MAX_BUCKETED_KEY_LENGTH,
            "`(record_id, bucket, slot)`",
            "`bucket` and `slot` take 10 bytes",
        ),
    };
    let length = lit.base10_parse::<u64>().ok();
    if let Some(length) = length.filter(|l| (1..=u64::from(max)).contains(l)) {
        return u16::try_from(length).ok();
    }
    let shape_note = bucket
        .map(|b| format!(" for a counter with `bucket = {b}`"))
        .unwrap_or_default();
    errors.at(
        lit,
        format_args!("`max_key_length` must be between 1 and {max}{shape_note}"),
        format_args!(
            "use `max_key_length = {max}` or less: MySQL and MariaDB index at most 3,072 bytes in the \
             primary key {shape}, a `utf8mb4` character takes 4 bytes and {bytes}; the default is \
             {DEFAULT_MAX_KEY_LENGTH}"
        ),
    );
    None
}

/// Counters whose names, tables or generated methods would clash with an earlier counter's:
/// reported, and returned by index.
fn check_collisions(counters: &[Counter], errors: &mut Errors) -> Vec<usize> {
    let mut tables: HashMap<String, &Ident> = HashMap::new();
    let mut methods: HashMap<String, &Ident> = HashMap::new();
    let mut clashing = Vec::new();
    for (index, counter) in counters.iter().enumerate() {
        let name = counter.name.to_string();
        if methods.get(&name).is_some_and(|first| **first == name) {
            errors.at(
                &counter.name,
                format_args!("counter `{name}` is declared twice"),
                "declare each counter once",
            );
            clashing.push(index);
            continue;
        }
        for method in [name.clone(), format!("{name}_of"), format!("{name}_totals")] {
            if let Some(other) = methods.get(&method) {
                errors.at(
                    &counter.name,
                    format_args!("counter `{name}` would generate the method `{method}`, which counter `{other}` generates too"),
                    "rename one of the two counters",
                );
                clashing.push(index);
            }
            methods.entry(method).or_insert(&counter.name);
        }
        let table = counter.table.to_string();
        if let Some(other) = tables.get(&table) {
            errors.at(
                &counter.table,
                format_args!("counters `{other}` and `{name}` would share the table `{table}`"),
                "give each counter its own table with `table = …`",
            );
            clashing.push(index);
        }
        tables.entry(table).or_insert(&counter.name);
    }
    // An adopted column's counts belong to one counter: a second counter adopting it, or rolling
    // up into it, would count them twice or write over them.
    for (index, counter) in counters.iter().enumerate() {
        let Some(column) = &counter.adopt else {
            continue;
        };
        for other in &counters[..index] {
            let uses = [(&other.adopt, "adopts"), (&other.cache, "rolls up into")];
            for (used, how) in uses {
                if used.as_ref().is_some_and(|c| c == column) {
                    errors.at(
                        column,
                        format_args!(
                            "counter `{}` {how} the column `{column}` too: an adopted column's counts belong to one counter",
                            other.name
                        ),
                        "adopt each column with one counter, and roll the others up into columns of their own",
                    );
                    clashing.push(index);
                }
            }
        }
        for other in &counters[index + 1..] {
            if let Some(cache) = other.cache.as_ref().filter(|c| *c == column) {
                errors.at(
                    cache,
                    format_args!(
                        "counter `{}` rolls up into the column `{column}`, which counter `{}` adopts: the roll-up would write over its counts",
                        other.name, counter.name
                    ),
                    "roll the other counter up into a column of its own",
                );
            }
        }
    }
    clashing
}

/// Diesel's default table name: the struct name in snake_case, plus `s`.
fn infer_table_name(name: &str) -> String {
    let mut result = String::with_capacity(name.len() + 1);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            result.push('_');
        }
        result.extend(c.to_lowercase());
    }
    result.push('s');
    result
}

/// `text` as an identifier, or `None` where `Ident::new` would panic (a macro must not).
fn ident(text: &str, span: Span) -> Option<Ident> {
    let mut ident = Ident::parse_any.parse_str(text).ok()?;
    ident.set_span(span);
    Some(ident)
}
