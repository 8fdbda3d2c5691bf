//! `#[derive(SlottedKey)]`: a newtype over a key type keys a counter as its inner key.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Path};

use crate::errors::Errors;

const KEY_FORM: &str = "derive it on a struct of one field whose type keys a counter: \
                        `#[derive(SlottedKey)] struct PostId(i32);`";

/// The derive: `impl CounterKey` for the newtype, by its one field's `CounterKey`.
pub fn derive(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let krate = crate_path(input, &mut errors);
    if !input.generics.params.is_empty() {
        errors.at(
            &input.generics,
            "#[derive(SlottedKey)] does not support generic structs",
            "derive it on a concrete newtype, e.g. `struct PostId(i32)`",
        );
    }
    let field = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Unnamed(f) if f.unnamed.len() == 1 => f.unnamed.first(),
            Fields::Named(f) if f.named.len() == 1 => f.named.first(),
            fields => {
                let count = fields.len();
                let what = if count == 0 {
                    "no field".to_owned()
                } else {
                    format!("{count} fields")
                };
                errors.at(
                    &input.ident,
                    format_args!("#[derive(SlottedKey)] needs a struct of exactly one field, and `{}` has {what}", input.ident),
                    KEY_FORM,
                );
                None
            }
        },
        Data::Enum(e) => {
            errors.at(
                e.enum_token,
                "#[derive(SlottedKey)] does not support enums",
                KEY_FORM,
            );
            None
        }
        Data::Union(u) => {
            errors.at(
                u.union_token,
                "#[derive(SlottedKey)] does not support unions",
                KEY_FORM,
            );
            None
        }
    };
    if let Err(errors) = errors.finish() {
        return errors.to_compile_error();
    }
    let Some(field) = field else {
        return quote!();
    };
    let ident = &input.ident;
    let inner = &field.ty;
    let (read, build) = match &field.ident {
        Some(name) => (quote!(&self.#name), quote!(|inner| #ident { #name: inner })),
        None => (quote!(&self.0), quote!(#ident)),
    };
    let key = quote!(#krate::CounterKey);
    // `<Inner as CounterKey>::…` spanned over the field's type: a field that keys nothing is
    // the error, said there (rustc spans a failed path by all of its tokens).
    let inner_key = |item: TokenStream| {
        let (open, close) = crate::expand::over(inner, quote!(<), quote!(as #key>::#item));
        quote!(#open #inner #close)
    };
    let (inner_sql, inner_kinds) = (inner_key(quote!(SqlType)), inner_key(quote!(KINDS)));
    let (key_value, from_raw) = (inner_key(quote!(key_value)), inner_key(quote!(from_raw)));
    let sealed = quote! {
        #[automatically_derived]
        impl #krate::__private::SealedKey for #ident {}
    };
    let declared = quote! {
        #sealed

        #[automatically_derived]
        impl #key for #ident {
            type SqlType = #inner_sql;
            const KINDS: &'static [#krate::KeyKind] = #inner_kinds;
            #[inline]
            fn key_value(&self) -> #krate::__private::KeyValue<'_> {
                #key_value(#read)
            }
            #[inline]
            fn from_raw(raw: #krate::__private::RawKey) -> ::core::option::Option<Self> {
                ::core::option::Option::map(#from_raw(raw), #build)
            }
        }
    };
    // A field of a type that keys a counter only with a slotted-core feature (`uuid::Uuid`,
    // `chrono::NaiveDate`, by name): with the feature off, one error at the field that names
    // it, and a stand-in key, so that the model keyed by this newtype adds no error.
    let Some(feature) = crate::ast::key_type(inner).feature() else {
        return declared;
    };
    let gate = format_ident!("if_{}", feature);
    let error = crate::expand::feature_off_error(inner, feature);
    let stand_in = quote!(<i32 as #key>);
    quote! {
        #krate::__private::#gate! {
            { #declared }
            {
                #sealed

                #[automatically_derived]
                impl #key for #ident {
                    type SqlType = #stand_in::SqlType;
                    const KINDS: &'static [#krate::KeyKind] = #stand_in::KINDS;
                    fn key_value(&self) -> #krate::__private::KeyValue<'_> {
                        #stand_in::key_value(&0)
                    }
                    fn from_raw(_: #krate::__private::RawKey) -> ::core::option::Option<Self> {
                        ::core::option::Option::None
                    }
                }

                #error
            }
        }
    }
}

/// `#[slotted(crate = path)]`, else `::slotted_core`; any other key in `#[slotted]` is an error.
fn crate_path(input: &DeriveInput, errors: &mut Errors) -> Path {
    let mut krate = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("slotted")) {
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let path = meta.value()?.call(Path::parse_mod_style)?;
                if krate.is_some() {
                    errors.at(&meta.path, "duplicate `crate`", "give `crate = …` once");
                }
                krate = Some(path);
                Ok(())
            } else {
                errors.at(
                    &meta.path,
                    "#[derive(SlottedKey)] takes only `crate` in #[slotted]",
                    "`#[slotted(crate = my_slotted)]`, when slotted-core is renamed; counters are declared on the model",
                );
                // Skip the value, if any.
                if meta.input.peek(syn::Token![=]) {
                    let _: syn::Expr = meta.value()?.parse()?;
                }
                Ok(())
            }
        });
        if let Err(e) = result {
            errors.push(syn::Error::new(
                e.span(),
                format!(
                    "{e}\n\nhelp: the correct format looks like `#[slotted(crate = my_slotted)]`"
                ),
            ));
        }
    }
    krate.unwrap_or_else(|| syn::parse_quote!(::slotted_core))
}
