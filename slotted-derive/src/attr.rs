//! Reads `#[slotted(…)]` and the parts of Diesel's `#[diesel(…)]` slotted reuses.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitInt, Meta, Path, Token};

use crate::errors::Errors;

const SLOTTED: &str = "slotted";
const COUNTER: &str = "counter";
const SLOTS: &str = "slots";
const TABLE: &str = "table";
const MAX_KEY_LENGTH: &str = "max_key_length";
const STRATEGY: &str = "strategy";
const BUCKET: &str = "bucket";
const PREFILL: &str = "prefill";
const CACHE: &str = "cache";
const ADOPT: &str = "adopt";
const STORAGE: &str = "storage";
const CRATE: &str = "crate";
const FOLLOW: &str = "follow";
const SUM: &str = "sum";
const FILTER: &str = "filter";
const NOT: &str = "not";
const RECORD: &str = "record";
const THROUGH: &str = "through";
const KEYS: [&str; 16] = [
    COUNTER,
    SLOTS,
    TABLE,
    MAX_KEY_LENGTH,
    STRATEGY,
    BUCKET,
    PREFILL,
    CACHE,
    ADOPT,
    STORAGE,
    CRATE,
    FOLLOW,
    SUM,
    FILTER,
    RECORD,
    THROUGH,
];

pub const COUNTER_FORM: &str =
    "the correct format looks like `#[slotted(counter = likes, slots = 16)]`";

pub const FOLLOW_FORM: &str = "the correct format looks like `#[slotted(counter = comments, slots = 16, follow = comments(post_id))]`: the child table, and its column that holds this model's key";

pub const THROUGH_FORM: &str = "the correct format looks like `#[slotted(counter = comments, slots = 16, follow = comments(post_id), through = posts(community_id))]`: the table whose primary key the child's column holds, and its column that holds this model's key";

pub const FILTER_FORM: &str = "the correct format looks like `filter(local, not(deleted))`: boolean columns of the child table, each true, or not true inside `not(…)`";

/// `follow = comments(post_id)`, as written.
pub struct FollowAttr {
    /// The child table.
    pub table: Ident,
    /// Its columns that hold the parent's key.
    pub key_columns: Vec<Ident>,
}

/// One condition of `filter(…)`: `local` (true) or `not(deleted)` (not true).
pub struct FilterAttr {
    pub column: Ident,
    pub value: bool,
}

/// One `#[slotted(…)]` attribute that declares a counter, as written.
pub struct CounterAttr<'a> {
    pub attr: &'a Attribute,
    pub counter: Option<Ident>,
    pub slots: Option<LitInt>,
    pub table: Option<Ident>,
    pub max_key_length: Option<LitInt>,
    pub strategy: Option<Ident>,
    pub bucket: Option<Ident>,
    pub prefill: Option<Ident>,
    pub cache: Option<Ident>,
    pub adopt: Option<Ident>,
    pub storage: Option<Ident>,
    /// `follow = comments(post_id)`: the counter follows a child table.
    pub follow: Option<FollowAttr>,
    /// `sum = score`: the child's integer column a row adds.
    pub sum: Option<Ident>,
    /// `filter(local, not(deleted))`: the child's boolean columns a row must hold to count.
    pub filter: Option<Vec<FilterAttr>>,
    /// `record = 1`: the one record every child row counts for (a site-wide counter).
    pub record: Option<LitInt>,
    /// `through = posts(community_id)`: the table between the child and this model.
    pub through: Option<FollowAttr>,
    /// `follow` was written, even if its value was wrong and reported: `sum`, `filter` and
    /// `record` are then not also reported as given without it.
    pub follow_written: bool,
    /// A key or value was wrong and reported: do not also report missing keys.
    pub invalid: bool,
    /// The attribute's syntax is broken (`counter: likes`) and was reported: only `counter`, if
    /// recovered, is known, so that the fallback can still declare the counter's methods.
    pub broken: bool,
}

/// Every `#[slotted(…)]` attribute of the input.
pub struct SlottedAttrs<'a> {
    pub counters: Vec<CounterAttr<'a>>,
    pub krate: Option<Path>,
}

pub fn parse_slotted<'a>(attrs: &'a [Attribute], errors: &mut Errors) -> SlottedAttrs<'a> {
    let mut out = SlottedAttrs {
        counters: Vec::new(),
        krate: None,
    };
    for attr in attrs.iter().filter(|a| a.path().is_ident(SLOTTED)) {
        let mut counter = CounterAttr {
            attr,
            counter: None,
            slots: None,
            table: None,
            max_key_length: None,
            strategy: None,
            bucket: None,
            prefill: None,
            cache: None,
            adopt: None,
            storage: None,
            follow: None,
            sum: None,
            filter: None,
            record: None,
            through: None,
            follow_written: false,
            invalid: false,
            broken: false,
        };
        let mut declares_counter = false;
        let mut krate_here = false;
        if attr.meta.require_list().is_err() {
            errors.at(attr, "`#[slotted]` needs arguments", COUNTER_FORM);
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let Some(key) = meta.path.get_ident().map(Ident::to_string) else {
                errors.at(&meta.path, "expected a key such as `counter` or `slots`", COUNTER_FORM);
                return skip_value(&meta);
            };
            match key.as_str() {
                // Parse #[slotted(counter = likes)]
                COUNTER => {
                    declares_counter = true;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.counter, parse_ident(&meta, COUNTER, "counter = likes, slots = 16")?)
                }
                // Parse #[slotted(slots = 16)]
                SLOTS => {
                    declares_counter = true;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.slots, parse_int(&meta, SLOTS, "counter = likes, slots = 16")?)
                }
                // Parse #[slotted(table = post_likes)]
                TABLE => {
                    declares_counter = true;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.table, parse_ident(&meta, TABLE, "table = post_likes")?)
                }
                // Parse #[slotted(max_key_length = 512)]
                MAX_KEY_LENGTH => {
                    declares_counter = true;
                    let value = parse_int(&meta, MAX_KEY_LENGTH, "max_key_length = 512")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.max_key_length, value)
                }
                // Parse #[slotted(strategy = thread)]
                STRATEGY => {
                    declares_counter = true;
                    let value = parse_ident(&meta, STRATEGY, "strategy = thread")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.strategy, value)
                }
                // Parse #[slotted(bucket = day)]
                BUCKET => {
                    declares_counter = true;
                    let value = parse_ident(&meta, BUCKET, "bucket = day")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.bucket, value)
                }
                // Parse #[slotted(prefill)]
                PREFILL => {
                    declares_counter = true;
                    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                        errors.at(&meta.path, "`prefill` takes no value", "write it alone: `#[slotted(counter = likes, slots = 16, prefill)]`");
                        skip_value(&meta)?;
                    }
                    let flag = meta.path.get_ident().cloned().unwrap_or_else(|| Ident::new(PREFILL, Span::call_site()));
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.prefill, Ok(flag))
                }
                // Parse #[slotted(cache = likes_count)]
                CACHE => {
                    declares_counter = true;
                    let value = parse_ident(&meta, CACHE, "cache = likes_count")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.cache, value)
                }
                // Parse #[slotted(adopt = likes_count)]
                ADOPT => {
                    declares_counter = true;
                    let value = parse_ident(&meta, ADOPT, "adopt = likes_count")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.adopt, value)
                }
                // Parse #[slotted(storage = shared)]
                STORAGE => {
                    declares_counter = true;
                    let value = parse_ident(&meta, STORAGE, "storage = shared")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.storage, value)
                }
                // Parse #[slotted(follow = comments(post_id))]
                FOLLOW => {
                    declares_counter = true;
                    counter.follow_written = true;
                    let value = parse_follow(&meta)?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.follow, value)
                }
                // Parse #[slotted(sum = score)]
                SUM => {
                    declares_counter = true;
                    let value = parse_ident(&meta, SUM, "counter = score, slots = 16, follow = post_votes(post_id), sum = score")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.sum, value)
                }
                // Parse #[slotted(filter(local, not(deleted)))]
                FILTER => {
                    declares_counter = true;
                    let value = parse_filter(&meta)?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.filter, value)
                }
                // Parse #[slotted(record = 1)]
                RECORD => {
                    declares_counter = true;
                    let value = parse_int(&meta, RECORD, "counter = comments, slots = 64, follow = comments, record = 1")?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.record, value)
                }
                // Parse #[slotted(through = posts(community_id))]
                THROUGH => {
                    declares_counter = true;
                    let value = parse_table_columns(&meta, THROUGH, THROUGH_FORM)?;
                    set_once(errors, &meta, &mut counter.invalid, &mut counter.through, value)
                }
                // Parse #[slotted(crate = my_slotted)]
                CRATE => {
                    let path: Path = meta.value()?.call(Path::parse_mod_style).map_err(|e| {
                        syn::Error::new(e.span(), "expected a path\n\nhelp: the correct format looks like `#[slotted(crate = my_slotted)]`")
                    })?;
                    if out.krate.is_some() || krate_here {
                        errors.at(&meta.path, "duplicate `crate`", "give `crate = …` once, in one #[slotted] attribute");
                    } else {
                        out.krate = Some(path);
                    }
                    krate_here = true;
                    Ok(())
                }
                _ => {
                    let suggestion = KEYS
                        .iter()
                        .find(|k| similar(k, &key))
                        .map(|k| format!("did you mean `{k}`? "))
                        .unwrap_or_default();
                    errors.at(
                        &meta.path,
                        format_args!("unknown key `{key}` in #[slotted]"),
                        format_args!("{suggestion}#[slotted] takes `counter`, `slots`, `table`, `max_key_length`, `strategy`, `bucket`, `prefill`, `cache`, `adopt`, `storage`, `follow`, `sum`, `filter`, `record`, `through` and `crate`"),
                    );
                    counter.invalid = true;
                    skip_value(&meta)
                }
            }
        });
        if let Err(e) = result {
            // syn's own syntax errors ("expected `,`") come without the right form: add it.
            if e.to_string().contains("\n\nhelp: ") {
                errors.push(e);
            } else {
                errors.push(syn::Error::new(
                    e.span(),
                    format!("{e}\n\nhelp: {COUNTER_FORM}"),
                ));
            }
            // Keep the counter's name, so that its uses do not fail as well.
            let name = counter
                .counter
                .take()
                .or_else(|| recover_counter_name(attr));
            if let Some(name) = name {
                out.counters.push(CounterAttr {
                    counter: Some(name),
                    invalid: true,
                    broken: true,
                    ..counter
                });
            }
            continue;
        }
        if declares_counter || !krate_here {
            out.counters.push(counter);
        }
    }
    out
}

/// The counter's name in an attribute whose syntax is broken: the identifier after `counter`
/// and any punctuation (`counter: likes`, `counter == likes`, `counter => likes`).
fn recover_counter_name(attr: &Attribute) -> Option<Ident> {
    let Meta::List(list) = &attr.meta else {
        return None;
    };
    let mut tokens = list
        .tokens
        .clone()
        .into_iter()
        .skip_while(|t| !matches!(t, proc_macro2::TokenTree::Ident(i) if i == COUNTER));
    tokens.next()?;
    tokens
        .find(|t| !matches!(t, proc_macro2::TokenTree::Punct(p) if p.as_char() != ','))
        .and_then(|t| match t {
            proc_macro2::TokenTree::Ident(name) => Some(name),
            _ => None,
        })
}

/// Stores a key's value, or reports it as given twice in one attribute.
fn set_once<T>(
    errors: &mut Errors,
    meta: &ParseNestedMeta<'_>,
    invalid: &mut bool,
    slot: &mut Option<T>,
    value: syn::Result<T>,
) -> syn::Result<()> {
    let value = match value {
        Ok(value) => value,
        Err(e) => {
            errors.push(e);
            *invalid = true;
            return Ok(());
        }
    };
    if slot.is_some() {
        let key = meta
            .path
            .get_ident()
            .map(Ident::to_string)
            .unwrap_or_default();
        errors.at(
            &meta.path,
            format_args!("duplicate `{key}` in one #[slotted] attribute"),
            "give each key once; declare a second counter in an attribute of its own",
        );
    } else {
        *slot = Some(value);
    }
    Ok(())
}

/// `key = ident`. The outer error is bad syntax, which ends the attribute; the inner one a value
/// of the wrong kind, after which parsing goes on.
fn parse_ident(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
) -> syn::Result<syn::Result<Ident>> {
    let input = meta.value().map_err(|e| with_form(e, key, example))?;
    if input.peek(Ident::peek_any) {
        return Ok(Ok(input.call(Ident::parse_any)?));
    }
    let found: syn::Expr = input.parse().map_err(|e| with_form(e, key, example))?;
    Ok(Err(syn::Error::new_spanned(
        found,
        format!("expected an identifier for `{key}`\n\nhelp: the correct format looks like `#[slotted({example})]`"),
    )))
}

/// `follow = comments(post_id[, …])`, as [`parse_ident`]: the outer error ends the attribute.
fn parse_follow(meta: &ParseNestedMeta<'_>) -> syn::Result<syn::Result<FollowAttr>> {
    parse_table_columns(meta, FOLLOW, FOLLOW_FORM)
}

/// `key = table(column[, …])` or `key = table` (`follow`, `through`), as [`parse_ident`]; `form`
/// is the help with the right form.
fn parse_table_columns(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    form: &str,
) -> syn::Result<syn::Result<FollowAttr>> {
    let with_help = |e: syn::Error| syn::Error::new(e.span(), format!("{e}\n\nhelp: {form}"));
    let input = meta.value().map_err(with_help)?;
    if !input.peek(Ident::peek_any) {
        let found: syn::Expr = input.parse().map_err(with_help)?;
        let what = if key == FOLLOW {
            "the child table and its key column"
        } else {
            "the table between and its column"
        };
        return Ok(Err(syn::Error::new_spanned(
            found,
            format!("expected {what} for `{key}`\n\nhelp: {form}"),
        )));
    }
    let table = input.call(Ident::parse_any)?;
    if !input.peek(syn::token::Paren) {
        // `follow = comments, record = 1`: every row counts for one record (checked with
        // `record` in follow.rs).
        return Ok(Ok(FollowAttr {
            table,
            key_columns: Vec::new(),
        }));
    }
    let content;
    syn::parenthesized!(content in input);
    let columns = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, Ident::parse_any)
        .map_err(with_help)?;
    if columns.is_empty() {
        return Ok(Err(syn::Error::new(
            table.span(),
            format!(
                "`{key} = {table}()` names no {what}\n\nhelp: {form}",
                what = if key == FOLLOW {
                    "key column"
                } else {
                    "column"
                }
            ),
        )));
    }
    Ok(Ok(FollowAttr {
        table,
        key_columns: columns.into_iter().collect(),
    }))
}

/// `filter(local, not(deleted))`, as [`parse_ident`].
fn parse_filter(meta: &ParseNestedMeta<'_>) -> syn::Result<syn::Result<Vec<FilterAttr>>> {
    let with_help =
        |e: syn::Error| syn::Error::new(e.span(), format!("{e}\n\nhelp: {FILTER_FORM}"));
    if !meta.input.peek(syn::token::Paren) {
        // `filter = not(deleted)`: the value is skipped, so that parsing goes on to the next key.
        skip_value(meta)?;
        return Ok(Err(syn::Error::new(
            meta.path.span(),
            format!("`filter` takes its columns in parentheses\n\nhelp: {FILTER_FORM}"),
        )));
    }
    // `filter()`, `not()`: syn's nested parser fails on an empty list with "expected nested
    // attribute"; say which list names no column.
    let empty_list = |input: syn::parse::ParseStream<'_>| {
        input
            .fork()
            .parse::<proc_macro2::Group>()
            .is_ok_and(|group| group.stream().is_empty())
    };
    if empty_list(meta.input) {
        let _: proc_macro2::Group = meta.input.parse()?;
        return Ok(Err(syn::Error::new(
            meta.path.span(),
            format!("`filter()` names no column\n\nhelp: {FILTER_FORM}; to count every row, leave `filter` out"),
        )));
    }
    let mut conditions = Vec::new();
    let mut wrong = None;
    meta.parse_nested_meta(|inner| {
        let Some(name) = inner.path.get_ident().cloned() else {
            wrong.get_or_insert(syn::Error::new(inner.path.span(), format!("expected a column of the child table\n\nhelp: {FILTER_FORM}")));
            return skip_value(&inner);
        };
        if name == NOT && empty_list(inner.input) {
            let _: proc_macro2::Group = inner.input.parse()?;
            wrong.get_or_insert(syn::Error::new(
                name.span(),
                format!("`not()` names no column\n\nhelp: {FILTER_FORM}"),
            ));
            return Ok(());
        }
        if name == NOT && inner.input.peek(syn::token::Paren) {
            return inner.parse_nested_meta(|column| {
                match column.path.get_ident() {
                    Some(column) => conditions.push(FilterAttr {
                        column: column.clone(),
                        value: false,
                    }),
                    None => {
                        wrong.get_or_insert(syn::Error::new(column.path.span(), format!("expected a column of the child table\n\nhelp: {FILTER_FORM}")));
                    }
                }
                skip_value(&column)
            });
        }
        if !inner.input.is_empty() && !inner.input.peek(Token![,]) {
            wrong.get_or_insert(syn::Error::new(
                name.span(),
                format!("a filter column takes no value: write `{name}` for rows where it is true, `not({name})` for rows where it is not\n\nhelp: {FILTER_FORM}"),
            ));
            return skip_value(&inner);
        }
        conditions.push(FilterAttr {
            column: name,
            value: true,
        });
        Ok(())
    })
    .map_err(with_help)?;
    Ok(match wrong {
        Some(e) => Err(e),
        None if conditions.is_empty() => Err(syn::Error::new(
            meta.path.span(),
            format!("`filter()` names no column\n\nhelp: {FILTER_FORM}"),
        )),
        None => Ok(conditions),
    })
}

/// `key = 16`, as [`parse_ident`].
fn parse_int(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
) -> syn::Result<syn::Result<LitInt>> {
    let input = meta.value().map_err(|e| with_form(e, key, example))?;
    if input.peek(LitInt) {
        return Ok(Ok(input.parse()?));
    }
    let found: syn::Expr = input.parse().map_err(|e| with_form(e, key, example))?;
    Ok(Err(syn::Error::new_spanned(
        found,
        format!("expected an integer literal for `{key}`\n\nhelp: the correct format looks like `#[slotted({example})]`"),
    )))
}

fn with_form(e: syn::Error, key: &str, example: &str) -> syn::Error {
    syn::Error::new(
        e.span(),
        format!("{e} after `{key}`\n\nhelp: the correct format looks like `#[slotted({example})]`"),
    )
}

/// Consumes `= value` or `(…)` after a key that was reported, so parsing goes on to the next.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let _: syn::Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _group: proc_macro2::Group = meta.input.parse()?;
    }
    Ok(())
}

/// One edit apart, or a letter too many or too few: worth a "did you mean".
fn similar(known: &str, typed: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (known.chars().collect(), typed.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

/// What slotted reads of `#[diesel(…)]`; everything else there is Diesel's business.
#[derive(Default)]
pub struct DieselAttrs {
    /// `table_name = posts` or `table_name = crate::schema::posts`.
    pub table_name: Option<Path>,
    /// `primary_key(id)`, with the list's span.
    pub primary_key: Option<(Vec<Ident>, Span)>,
}

/// A field's `#[diesel(column_name = …)]`, if it has one.
pub fn column_name(attrs: &[Attribute]) -> Option<Ident> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("diesel")) {
        let Ok(metas) = attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
        else {
            continue;
        };
        for meta in metas {
            if let Meta::NameValue(nv) = meta {
                if let (true, syn::Expr::Path(p)) = (nv.path.is_ident("column_name"), nv.value) {
                    found = p.path.get_ident().cloned();
                }
            }
        }
    }
    found
}

pub fn parse_diesel(attrs: &[Attribute]) -> DieselAttrs {
    let mut out = DieselAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("diesel")) {
        // Malformed #[diesel] attributes are Diesel's own derives' to report.
        let Ok(metas) = attr.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
        else {
            continue;
        };
        for meta in metas {
            match meta {
                // Parse #[diesel(table_name = posts)] and #[diesel(table_name = crate::schema::posts)]
                Meta::NameValue(nv) if nv.path.is_ident("table_name") => {
                    if let syn::Expr::Path(p) = nv.value {
                        out.table_name = Some(p.path);
                    }
                }
                // Parse #[diesel(primary_key(id))] and #[diesel(primary_key(a, b))]
                Meta::List(list) if list.path.is_ident("primary_key") => {
                    let span = list.delimiter.span().join();
                    if let Ok(keys) =
                        list.parse_args_with(Punctuated::<Ident, Token![,]>::parse_terminated)
                    {
                        out.primary_key = Some((keys.into_iter().collect(), span));
                    }
                }
                _ => {}
            }
        }
    }
    out
}
