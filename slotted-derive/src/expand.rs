//! Writes the code: per counter a Diesel `table!` (or, for shared storage, a marker type), its
//! `CounterTable` impl and three accessors; per model a `SlottedModel` impl. Everything reaches
//! the runtime through the `crate` path (`::slotted_core` unless renamed), and Diesel through its
//! hidden re-export.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;

use crate::ast::{Bucket, Counter, Fallback, KeyType, Model, Strategy};

pub fn expand(model: &Model<'_>) -> TokenStream {
    let krate = &model.krate;
    let ident = model.ident;
    let counters = model
        .counters
        .iter()
        .map(|counter| expand_counter(model, counter));
    let specs = model.counters.iter().map(|c| {
        let ty = counter_type(c);
        quote!(<#ty as #krate::CounterTable>::SPEC)
    });
    quote! {
        #(#counters)*

        #[automatically_derived]
        impl #krate::SlottedModel for #ident {
            const COUNTERS: &'static [#krate::CounterSpec] = &[#(#specs),*];
        }
    }
}

/// The code written beside the errors: the sound counters in full, and for each counter that
/// an attribute names but that cannot be declared, methods of the same names on
/// `InvalidCounter`, which take any key and compile any call, so the user's code that calls them
/// adds no error of its own.
pub fn expand_fallback(fallback: &Fallback<'_>) -> TokenStream {
    let (krate, ident, vis) = (&fallback.krate, fallback.ident, fallback.vis);
    let declared = match &fallback.model {
        Some(model) => expand(model),
        None => quote! {
            #[automatically_derived]
            impl #krate::SlottedModel for #ident {
                const COUNTERS: &'static [#krate::CounterSpec] = &[];
            }
        },
    };
    let stubs = fallback.stubs.iter().map(|name| {
        let of = format_ident!("{}_of", name);
        let totals = format_ident!("{}_totals", name);
        let invalid = quote!(#krate::Counter<'static, #krate::__private::InvalidCounter>);
        quote! {
            #[doc(hidden)]
            #vis fn #name(&self) -> #invalid {
                #krate::Counter::of(0)
            }

            #[doc(hidden)]
            #vis fn #of<K>(_key: K) -> #invalid {
                #krate::Counter::of(0)
            }

            #[doc(hidden)]
            #vis fn #totals<K, C>(
                _keys: &[K],
                _conn: &mut C,
            ) -> #krate::Result<#krate::__private::HashMap<K, i64>> {
                ::core::result::Result::Ok(#krate::__private::HashMap::new())
            }
        }
    });
    let stubs = (!fallback.stubs.is_empty()).then(|| {
        quote! {
            #[automatically_derived]
            impl #ident {
                #(#stubs)*
            }
        }
    });
    quote!(#declared #stubs)
}

/// The type that names the counter: the Diesel table type, or the shared marker.
fn counter_type(counter: &Counter) -> TokenStream {
    let table = &counter.table;
    if counter.shared {
        quote!(#table::counter)
    } else {
        quote!(#table::table)
    }
}

fn expand_counter(model: &Model<'_>, counter: &Counter) -> TokenStream {
    let krate = &model.krate;
    let (ident, vis) = (model.ident, model.vis);
    let name = &counter.name;
    let ty = counter_type(counter);
    // The key type as the model writes it: the type system decides whether it keys a counter
    // (`impl CounterKey`: slotted's key types, and newtypes that derive `SlottedKey`), spanned
    // at the key field.
    let key_ty = &model.key_ty;
    // Each key column's SQL type: by name, or `KeyOf<Key>` for a newtype (`table!` takes no
    // projection such as `<PostId as CounterKey>::SqlType`). `table!` resolves column types in a
    // module of its own, so a newtype's is an alias beside it, which it imports.
    let mut key_check = TokenStream::new();
    let composite = model.keys.len() > 1;
    let mut sql_types = Vec::new();
    for (index, field) in model.keys.iter().enumerate() {
        let field_ty = field.ty;
        let key_span = syn::spanned::Spanned::span(field_ty);
        sql_types.push(match field.key.sql_type() {
            Some(name) => SqlType::Named(name.parse().expect("an SQL type name")),
            None => {
                let column = key_column_name(index);
                let alias = format_ident!("__slotted_{}_of_{}", column, counter.table);
                key_check.extend(quote_spanned! {key_span=>
                    #[doc(hidden)]
                    #[allow(non_camel_case_types, dead_code)]
                    type #alias = #krate::KeyOf<#field_ty>;
                });
                SqlType::Alias(alias)
            }
        });
        // A type known by name only (`Uuid`, `NaiveDate`): it must be the type that keys that
        // SQL type.
        if field.key.known_by_name_only() {
            let sql_types = quote!(#krate::__private::diesel::sql_types);
            let sql_type = format_ident!("{}", field.key.sql_type().unwrap_or("Uuid"));
            // A one-column key through the counter type, so that a key type that keys nothing
            // is reported once, at `CounterTable::Key`.
            let check = if composite {
                let spanned_ty = respan(field_ty, key_span);
                quote_spanned!(key_span=> column_sql_type::<#spanned_ty, #sql_types::#sql_type>)
            } else {
                let spanned_ty = respan(&ty, key_span);
                quote_spanned!(key_span=> sql_type::<#spanned_ty, #sql_types::#sql_type>)
            };
            key_check.extend(quote_spanned! {key_span=>
                const _: () = #krate::__private::key_check::#check();
            });
        }
    }
    // A key field whose type is not known by name may key several columns (a tuple, a newtype
    // over one): the key must have as many columns as the model's primary key names.
    if let Some(field) = model.keys.iter().find(|k| k.key == KeyType::Other) {
        let span = syn::spanned::Spanned::span(field.ty);
        let (krate, ty) = (respan(krate, span), respan(&ty, span));
        let columns = model.keys.len();
        key_check.extend(quote_spanned! {span=>
            const _: () = #krate::__private::key_check::columns::<#ty>(#columns);
        });
    }
    // What the derive cannot tell by the name of a key type, the type system checks, spanned at
    // the attribute's value.
    if model.keys.iter().any(|k| k.key == KeyType::Other) {
        // Every token at the value: rustc spans a failed evaluation by the whole call.
        if let Some(span) = counter.max_key_length_at {
            let (krate, ty) = (respan(krate, span), respan(&ty, span));
            key_check.extend(quote_spanned! {span=>
                const _: () = #krate::__private::key_check::max_key_length::<#ty>();
            });
        }
        if let Some(span) = counter.shared_at {
            let (krate, ty) = (respan(krate, span), respan(&ty, span));
            key_check.extend(quote_spanned! {span=>
                const _: () = #krate::__private::key_check::shared::<#ty>();
            });
        }
    }
    let of = format_ident!("{}_of", name);
    let totals = format_ident!("{}_totals", name);
    let totals_async = format_ident!("{}_totals_async", name);
    let model_name = ident.unraw().to_string();
    let counter_name = name.to_string();
    let slots = counter.slots;
    let max_key_length = counter.max_key_length;
    let strategy = match counter.strategy {
        Strategy::Thread => quote!(Thread),
        Strategy::Random => quote!(Random),
        Strategy::Connection => quote!(Connection),
    };
    let parent_table = model
        .parent
        .segments
        .last()
        .map(|s| s.ident.unraw().to_string())
        .unwrap_or_default();
    let (table_name, storage) = if counter.shared {
        let record_type = format!("{parent_table}.{counter_name}");
        (
            quote!(#krate::SHARED_TABLE),
            quote!(#krate::Storage::Shared { record_type: #record_type }),
        )
    } else {
        let table_name = counter.table.to_string();
        (quote!(#table_name), quote!(#krate::Storage::Table))
    };
    let bucket = match counter.bucket {
        None => quote!(::core::option::Option::None),
        Some(Bucket::Day) => quote!(::core::option::Option::Some(#krate::BucketWidth::Day)),
        Some(Bucket::Hour) => quote!(::core::option::Option::Some(#krate::BucketWidth::Hour)),
    };
    let prefill = counter.prefill;
    let parent = &model.parent;
    // A counter column of the model's table (`cache`, `adopt`): its names, checked by Diesel's
    // `Column`, and its width, checked to be `Integer` or `BigInt`.
    let column_spec = |column: &Option<Ident>| match column {
        None => quote!(::core::option::Option::None),
        Some(column) => {
            let column_trait = quote!(#krate::__private::diesel::Column);
            let key_columns = model.keys.iter().map(|k| {
                let key_column = &k.column;
                quote!(<#parent::#key_column as #column_trait>::NAME)
            });
            // The column's type is checked at the attribute's value.
            let column_path = respan(&quote!(#parent::#column), column.span());
            quote!(::core::option::Option::Some(#krate::CacheSpec {
                table: #parent_table,
                key_columns: &[#(#key_columns),*],
                column: <#parent::#column as #column_trait>::NAME,
                bits: #krate::__private::cache_column_bits::<#column_path>(),
            }))
        }
    };
    let (cache, adopt) = (column_spec(&counter.cache), column_spec(&counter.adopt));
    let cache_impl = counter.cache.as_ref().map(|_| {
        quote! {
            #[automatically_derived]
            impl #krate::CachedCounterTable for #ty {}
        }
    });
    let adopt_impl = counter.adopt.as_ref().map(|_| {
        quote! {
            #[automatically_derived]
            impl #krate::AdoptingCounterTable for #ty {}
        }
    });
    let marker_impls = {
        let bucketed = counter
            .bucket
            .map(|_| quote!(#[automatically_derived] impl #krate::BucketedCounterTable for #ty {}));
        let prefilled = prefill.then(
            || quote!(#[automatically_derived] impl #krate::PrefilledCounterTable for #ty {}),
        );
        quote!(#bucketed #prefilled #cache_impl #adopt_impl)
    };
    let declaration = declare_table(model, counter, &sql_types);
    // A composite key is built from the record's fields; a one-column key is borrowed.
    let this_key = match &model.keys[..] {
        [one] => {
            let field = one.ident;
            quote!(#krate::Counter::new(&self.#field))
        }
        many => {
            let fields = many.iter().map(|k| k.ident);
            quote!(#krate::Counter::of((#(::core::clone::Clone::clone(&self.#fields),)*)))
        }
    };
    let accessor_doc = format!("The `{counter_name}` counter of this record ({slots} slots).");
    let of_doc = format!(
        "The `{counter_name}` counter of the record with this key, without loading the record."
    );
    let totals_doc = format!(
        "The `{counter_name}` counts of many records by key, each key present (0 when it has no \
         slot): one query per `slotted_core::TOTALS_CHUNK` keys."
    );
    quote! {
        #declaration
        #key_check

        #[automatically_derived]
        impl #krate::CounterTable for #ty {
            type Key = #key_ty;
            const SPEC: #krate::CounterSpec = #krate::CounterSpec {
                model: #model_name,
                counter: #counter_name,
                table: #table_name,
                slots: #slots,
                strategy: #krate::SlotStrategy::#strategy,
                key: #krate::__private::key_kinds::<Self>(),
                max_key_length: #max_key_length,
                storage: #storage,
                bucket: #bucket,
                prefill: #prefill,
                cache: #cache,
                adopt: #adopt,
            };
        }

        #marker_impls

        // A counter whose accessors a crate does not call is not dead code of its author's.
        #[automatically_derived]
        #[allow(dead_code)]
        impl #ident {
            #[doc = #accessor_doc]
            #vis fn #name(&self) -> #krate::Counter<'_, #ty> {
                #this_key
            }

            #[doc = #of_doc]
            #vis fn #of(
                key: impl #krate::__private::IntoCounterKey<#key_ty>,
            ) -> #krate::Counter<'static, #ty> {
                #krate::Counter::of(#krate::__private::IntoCounterKey::into_counter_key(key))
            }

            #[doc = #totals_doc]
            #vis fn #totals<C: #krate::CounterConnection>(
                keys: &[#key_ty],
                conn: &mut C,
            ) -> #krate::Result<#krate::__private::HashMap<#key_ty, i64>> {
                #krate::Counter::<#ty>::totals(keys, conn)
            }

            #krate::__private::if_async! {
                #[doc = #totals_doc]
                #[doc = ""]
                #[doc = "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
                #vis fn #totals_async<'a, C: #krate::AsyncCounterConnection>(
                    keys: &'a [#key_ty],
                    conn: &'a mut C,
                ) -> impl ::core::future::Future<
                    Output = #krate::Result<#krate::__private::HashMap<#key_ty, i64>>,
                > + ::core::marker::Send + 'a {
                    #krate::Counter::<#ty>::totals_async(keys, conn)
                }
            }
        }
    }
}

/// The name of a counter table's key column: `record_id`, `record_id_2`, `record_id_3`.
fn key_column_name(index: usize) -> String {
    match index {
        0 => "record_id".to_owned(),
        n => format!("record_id_{}", n + 1),
    }
}

/// The SQL type of a counter table's key column.
enum SqlType {
    /// A Diesel SQL type's name (`Integer`), which `table!` has in scope.
    Named(TokenStream),
    /// An alias in the derive's scope (of `KeyOf<PostId>`), which `table!` imports.
    Alias(Ident),
}

/// The counter's table, as a Diesel `table!`; for shared storage, a module holding the marker
/// type (the rows are in `slotted_core::shared::slotted_counters`).
fn declare_table(model: &Model<'_>, counter: &Counter, sql_types: &[SqlType]) -> TokenStream {
    let krate = &model.krate;
    let table = &counter.table;
    let model_name = model.ident.unraw().to_string();
    let counter_name = counter.name.to_string();
    if counter.shared {
        let doc = format!(
            "The `{counter_name}` counter of [`{model_name}`], kept in the shared `slotted_counters` \
             table. Declared by `#[derive(SlottedCounter)]`."
        );
        let vis = model.vis;
        return quote! {
            #[doc = #doc]
            #[allow(non_camel_case_types)]
            #vis mod #table {
                /// The counter's type: `CounterTable` and the maintenance calls are on it.
                #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
                pub struct counter;
            }
        };
    }
    let table_doc = format!(
        "The slots of the `{counter_name}` counter of [`{model_name}`]: {} rows a record at most, \
         whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`.",
        counter.slots
    );

    let slot_doc = format!("The slot, 0 to {}.", counter.slots - 1);
    let (bucket_key, bucket_column) = match counter.bucket {
        None => (quote!(), quote!()),
        Some(_) => (
            quote!(bucket,),
            quote! {
                /// The time bucket: the Unix time, in seconds, at which it starts (UTC).
                bucket -> BigInt,
            },
        ),
    };
    let mut aliases = Vec::new();
    let mut key_names = Vec::new();
    let mut key_columns = Vec::new();
    for (index, (field, sql_type)) in model.keys.iter().zip(sql_types).enumerate() {
        let name = format_ident!("{}", key_column_name(index));
        let sql_type = match sql_type {
            SqlType::Named(name) => name.clone(),
            SqlType::Alias(alias) => {
                aliases.push(alias);
                quote!(#alias)
            }
        };
        let doc = format!("The `{}` of the counted `{model_name}`.", field.ident);
        key_columns.push(quote! {
            #[doc = #doc]
            #name -> #sql_type,
        });
        key_names.push(name);
    }
    // Given imports replace `table!`'s own, `diesel::sql_types::*`.
    let imports =
        (!aliases.is_empty()).then(|| quote!(use diesel::sql_types::*; #(use super::#aliases;)*));
    quote! {
        #krate::__private::diesel::table! {
            #imports
            #[doc = #table_doc]
            #table (#(#key_names,)* #bucket_key slot) {
                #(#key_columns)*
                #bucket_column
                #[doc = #slot_doc]
                slot -> SmallInt,
                /// This slot's share of the count.
                count -> BigInt,
            }
        }
    }
}

/// `tokens`, every one of them spanned at `span`: a diagnostic on the whole expression points
/// there, not at the derive.
pub(crate) fn respan(tokens: &impl quote::ToTokens, span: proc_macro2::Span) -> TokenStream {
    use proc_macro2::{Group, TokenTree};
    tokens
        .to_token_stream()
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(group) => {
                let mut inner = Group::new(group.delimiter(), respan(&group.stream(), span));
                inner.set_span(span);
                TokenTree::Group(inner)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}
