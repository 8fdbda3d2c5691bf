//! The checked model: what `expand` generates code from. Built when every attribute and the
//! struct itself are valid; otherwise every problem comes back at once, with a fallback model
//! of what could still be declared. The key, each counter, names and clashes are checked in
//! the submodules; this one puts the model together.

mod collision;
mod counter;
mod name;
mod primary_key;

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Fields, Ident, Path, Type, Visibility};

use crate::attr::{self, COUNTER_FORM};
use crate::errors::Errors;
use collision::{check_collisions, distinct_stubs};
use name::{ident, infer_table_name};
use primary_key::key_field;

pub use counter::{Bucket, Counter, Strategy};
pub(crate) use primary_key::key_type;
pub use primary_key::{KeyField, KeyType};

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
            match counter::counter(attr, &parent_table, kinds.as_deref(), &mut errors) {
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
