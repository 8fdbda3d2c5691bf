//! Writes the code: per counter a Diesel `table!` (or, for shared storage, a marker type), its
//! `CounterTable` impl and three accessors; per model a `SlottedModel` impl. Everything reaches
//! the runtime through the `crate` path (`::slotted_core` unless renamed), and Diesel through its
//! hidden re-export.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;

use crate::ast::{Bucket, Counter, Fallback, KeyType, Model, Strategy};

pub fn expand(model: &Model<'_>) -> TokenStream {
    gate_by_key_features(model, declare(model))
}

/// The model's counters, table check and `SlottedModel` impl.
fn declare(model: &Model<'_>) -> TokenStream {
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
    let parent_check = parent_check(model);
    quote! {
        #(#counters)*
        #parent_check

        #[automatically_derived]
        impl #krate::SlottedModel for #ident {
            const COUNTERS: &'static [#krate::CounterSpec] = &[#(#specs),*];
        }
    }
}

/// `declared` for a model keyed by a type that keys a counter only with a slotted-core
/// feature (`uuid::Uuid`, `chrono::NaiveDate`, known by the key field's type name): passed to
/// slotted-core's `if_uuid!` (`if_chrono!`), which keeps it when the feature is on and otherwise
/// keeps `feature_off`'s stubs and one error at the key field that names the feature. The user's
/// crate cannot tell which features slotted-core has; without this, `type Key = Uuid` failed
/// `CounterKey` at the field, with a note pointing into slotted-core, and again at the derive.
fn gate_by_key_features(model: &Model<'_>, declared: TokenStream) -> TokenStream {
    let krate = &model.krate;
    let mut out = declared;
    let mut gated = Vec::new();
    for field in &model.keys {
        let Some(feature) = field.key.feature() else {
            continue;
        };
        if gated.contains(&feature) {
            continue;
        }
        gated.push(feature);
        let gate = format_ident!("if_{}", feature);
        let off = feature_off(model, field.ty, feature);
        out = quote! {
            #krate::__private::#gate! { { #out } { #off } }
        };
    }
    out
}

/// What a model declares when its key needs slotted-core's `feature`, which is off: the stubs
/// of every counter (as for a counter whose attribute has an error, so that code calling them
/// adds no error) and one `compile_error!` spanned at the key field's type.
fn feature_off(model: &Model<'_>, ty: &syn::Type, feature: &str) -> TokenStream {
    let stubs = expand_fallback(&Fallback {
        ident: model.ident,
        vis: model.vis,
        krate: model.krate.clone(),
        model: None,
        stubs: model.counters.iter().map(|c| c.name.clone()).collect(),
    });
    let error = feature_off_error(ty, feature);
    quote!(#stubs #error)
}

/// `compile_error!` at the type (`uuid::Uuid`, `chrono::NaiveDate`) of a key that needs
/// slotted-core's `feature`, which is off: what to turn on.
pub(crate) fn feature_off_error(ty: &syn::Type, feature: &str) -> TokenStream {
    let written = quote!(#ty).to_string().replace(' ', "");
    let features = match feature {
        "uuid" => "\"postgres\", \"uuid\"",
        _ => "\"chrono\"",
    };
    let what = match feature {
        "uuid" => "a `Uuid` key is `uuid::Uuid`, on PostgreSQL",
        _ => "a `NaiveDate` key is `chrono::NaiveDate`, a `Date` column",
    };
    let message = format!(
        "a `{written}` key needs slotted-core's `{feature}` feature, which is off\n\n\
         help: turn it on where slotted-core is a dependency: \
         `slotted-core = {{ …, features = [{features}] }}` ({what})"
    );
    let (call, args) = over(ty, quote!(::core::compile_error!), quote!((#message);));
    quote!(#call #args)
}

/// `before` and `after` spanned at the first and the last token of `tokens`: what they enclose
/// spans all of it, so a diagnostic underlines a whole path such as `uuid::Uuid` (one span
/// would mark its first token only; a span cannot be joined on stable).
pub(crate) fn over(
    tokens: &impl quote::ToTokens,
    before: TokenStream,
    after: TokenStream,
) -> (TokenStream, TokenStream) {
    let trees: Vec<_> = tokens.to_token_stream().into_iter().collect();
    let first = trees
        .first()
        .map_or_else(proc_macro2::Span::call_site, |t| t.span());
    let last = trees.last().map_or(first, |t| t.span());
    (respan(&before, first), respan(&after, last))
}

/// Whether the expansion names the model's table (a `cache` or `adopt` column).
fn names_parent(model: &Model<'_>) -> bool {
    model
        .counters
        .iter()
        .any(|c| c.cache.is_some() || c.adopt.is_some() || c.follow.is_some())
}

/// The module the expansion finds under the model's table name when that is Diesel's default
/// and no such table is in scope (see [`in_parent_scope`]).
fn missing_table_module(model: &Model<'_>) -> Ident {
    format_ident!("__slotted_missing_table_of_{}", model.ident.unraw())
}

/// `expr`, which names the model's table, where that table is found. With `table_name` given,
/// as it is. With Diesel's default name, the user's table may be missing, and rustc would say
/// "cannot find module `posts`" at every use, without a word of `table_name`: the name is then
/// looked up in an inner block that glob-imports the module, inside an outer block that imports
/// a stand-in of the same name. The inner block's glob finds the user's table when the module
/// has one (declared or imported, by name or by glob); otherwise the outer stand-in, whose
/// `MissingTable` fails one check that says what to write (`parent_check`).
fn in_parent_scope(model: &Model<'_>, expr: TokenStream) -> TokenStream {
    if !model.parent_by_default {
        return expr;
    }
    let missing = missing_table_module(model);
    let parent = &model.parent;
    quote! {{
        #[allow(unused_imports)]
        use #missing as #parent;
        {
            #[allow(unused_imports)]
            use self::*;
            #expr
        }
    }}
}

/// For a model whose table is Diesel's default name and which names it: the stand-in of that
/// table (`in_parent_scope`) and the check that fails, once, when the stand-in is what the
/// expansion finds.
fn parent_check(model: &Model<'_>) -> TokenStream {
    if !model.parent_by_default || !names_parent(model) {
        return TokenStream::new();
    }
    let krate = &model.krate;
    let missing = missing_table_module(model);
    let mut columns: Vec<&Ident> = model.keys.iter().map(|k| &k.column).collect();
    for counter in &model.counters {
        columns.extend(counter.cache.iter().chain(&counter.adopt));
    }
    let mut seen = Vec::new();
    columns.retain(|c| {
        let fresh = !seen.contains(c);
        seen.push(*c);
        fresh
    });
    let model_name = model.ident.unraw().to_string();
    let table = model
        .parent
        .segments
        .last()
        .map(|s| s.ident.unraw().to_string())
        .unwrap_or_default();
    let uses = model
        .counters
        .iter()
        .flat_map(|c| {
            let cache = c
                .cache
                .iter()
                .map(|col| format!("`cache = {col}` is a column"));
            let adopt = c
                .adopt
                .iter()
                .map(|col| format!("`adopt = {col}` is a column"));
            let follow = c
                .follow
                .iter()
                .map(|f| format!("`follow = {}(…)` counts for the records", f.table));
            cache.chain(adopt).chain(follow)
        })
        .next()
        .unwrap_or_default();
    let message = format!(
        "no table `{table}` is in scope for `{model_name}`, whose {uses} of its table: \
         `{model_name}` has no `#[diesel(table_name = …)]`, and `{table}` is Diesel's default for it \
         (the struct's name in snake_case, plus `s`)\n\n\
         help: name the model's table: `#[diesel(table_name = …)]`, a name or a path such as \
         `crate::schema::{table}`; or bring its `table!` into scope (a model declared inside a \
         function names its table even when it is the default)"
    );
    let parent = &model.parent;
    let check = in_parent_scope(
        model,
        quote_spanned! {model.ident.span()=>
            if <#parent::table as #krate::__private::ParentTable>::MISSING {
                ::core::panic!(#message)
            }
        },
    );
    quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, non_snake_case, dead_code, unused_imports)]
        mod #missing {
            use super::*;
            pub type table = #krate::__private::MissingTable;
            #(pub type #columns = #krate::__private::MissingColumn;)*
        }

        const _: () = #check;
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
        let total = format_ident!("{}_total", name);
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

            #[doc(hidden)]
            #vis fn #total<K>(
                _key: K,
            ) -> #krate::__private::diesel::expression::SqlLiteral<#krate::__private::diesel::sql_types::BigInt> {
                #krate::__private::diesel::dsl::sql("0")
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
        // A type known by name only (`Uuid`, `NaiveDate`), whose column is declared by that
        // name: it must key that kind of column.
        if let Some(kind) = field.key.kind_by_name() {
            let written = quote!(#field_ty).to_string().replace(' ', "");
            let (real, column) = match kind {
                "Uuid" => ("uuid::Uuid", "Uuid"),
                _ => ("chrono::NaiveDate", "Date"),
            };
            let kind = format_ident!("{}", kind);
            key_check.extend(const_check(
                key_span,
                quote!(#krate::__private::key_check::keys_kind::<#ty>(#index, #krate::KeyKind::#kind)),
                &format!(
                    "`{written}` here is not `{real}`: the counter table declares this key's column \
                     `{column}`, by the type's name, and `{written}` keys another column type\n\n\
                     help: key the model by `{real}`, or rename this type"
                ),
            ));
        }
    }
    // A key field whose type is not known by name may key several columns (a tuple, a newtype
    // over one): the key must have as many columns as the model's primary key names.
    if let Some(field) = model.keys.iter().find(|k| k.key == KeyType::Other) {
        let columns = model.keys.len();
        key_check.extend(const_check(
            syn::spanned::Spanned::span(field.ty),
            quote!(#krate::__private::key_check::has_columns::<#ty>(#columns)),
            "the key field's type keys another number of columns than the model's primary key names\n\n\
             help: a composite key is a field per column, each named in \
             `#[diesel(primary_key(a, b))]` and each of a one-column key type",
        ));
    }
    // What the derive cannot tell by the name of a key type, the type system checks, spanned at
    // the attribute's value.
    if model.keys.iter().any(|k| k.key == KeyType::Other) {
        if let Some(span) = counter.max_key_length_at {
            key_check.extend(const_check(
                span,
                quote!(#krate::__private::key_check::has_text_column::<#ty>()),
                "`max_key_length` applies only to text keys (`String`, or a newtype over one)\n\n\
                 help: remove it",
            ));
        }
        if let Some(span) = counter.shared_at {
            key_check.extend(const_check(
                span,
                quote!(#krate::__private::key_check::fits_shared::<#ty>()),
                "shared storage keeps integer keys of up to 63 bits (its `record_id` is BIGINT)\n\n\
                 help: key the model by `i16`, `i32`, `i64` or `u32` (or a newtype over one), \
                 or use `storage = table`",
            ));
        }
    }
    let of = format_ident!("{}_of", name);
    let totals = format_ident!("{}_totals", name);
    let totals_async = format_ident!("{}_totals_async", name);
    let total = format_ident!("{}_total", name);
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
    // A counter column of the model's table (`cache`, `adopt`): its names, read through
    // `ParentColumn` (a Diesel `Column`, or a column of a missing table: `in_parent_scope`),
    // and its width, checked to be `Integer` or `BigInt` at the attribute's value (a projection,
    // whose error points there only).
    let column_spec = |column: &Option<Ident>| match column {
        None => quote!(::core::option::Option::None),
        Some(column) => {
            let column_trait = quote!(#krate::__private::ParentColumn);
            let key_columns = model.keys.iter().map(|k| {
                let key_column = &k.column;
                quote!(<#parent::#key_column as #column_trait>::NAME)
            });
            // The column's tokens spanned at the attribute's value, the table's left where
            // they are: a table that does not resolve is one error, at `table_name`.
            let at_column = |tokens: TokenStream| respan(&tokens, column.span());
            let (open, close) = (
                at_column(quote!(<<)),
                at_column(quote! {
                    ::#column as #column_trait>::SqlType as #krate::__private::CacheColumnType>::BITS
                }),
            );
            let bits = quote!(#open #parent #close);
            in_parent_scope(
                model,
                quote!(::core::option::Option::Some(#krate::CacheSpec {
                    table: #parent_table,
                    key_columns: &[#(#key_columns),*],
                    column: <#parent::#column as #column_trait>::NAME,
                    bits: #bits,
                })),
            )
        }
    };
    let (cache, adopt) = (column_spec(&counter.cache), column_spec(&counter.adopt));
    let follow = {
        let parent_keys: Vec<TokenStream> = model
            .keys
            .iter()
            .map(|k| {
                let key_column = &k.column;
                quote!(#parent::#key_column)
            })
            .collect();
        let spec = crate::follow::spec(counter.follow.as_ref(), &parent_keys, &model.key_ty, krate);
        match counter.follow {
            Some(_) => in_parent_scope(model, spec),
            None => spec,
        }
    };
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
        let following = counter.follow.as_ref().map(
            |_| quote!(#[automatically_derived] impl #krate::FollowingCounterTable for #ty {}),
        );
        quote!(#bucketed #prefilled #cache_impl #adopt_impl #following)
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
    let total_doc = format!(
        "The exact `{counter_name}` total of the record whose key is `key`, as an SQL expression \
         for `select`, `filter` and `order_by`: `key` is the key in the query, such as the \
         model's key column (a tuple of columns for a composite key). A correlated subquery \
         over the record's slot rows; see `slotted_core::query`."
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
                follow: #follow,
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

            #[doc = #total_doc]
            #vis fn #total<__SlottedKeyExpression: #krate::query::TotalKey<#ty>>(
                key: __SlottedKeyExpression,
            ) -> #krate::query::Total<#ty, __SlottedKeyExpression::Expression> {
                #krate::query::Total::new(#krate::query::TotalKey::into_key(key))
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

/// `const _: () = if !check { panic!(message) };`, every token at `span`: a failed check is one
/// error, the message, at the user's attribute or field (a panic inside slotted-core would add a
/// note pointing there).
fn const_check(span: proc_macro2::Span, check: TokenStream, message: &str) -> TokenStream {
    respan(
        &quote!(const _: () = if !#check { ::core::panic!(#message) };),
        span,
    )
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
