//! `follow = comments(post_id)`, `sum = score`, `filter(local, not(deleted))`: a counter that
//! follows a child table. Its checks against the counter's other keys (here, not in ast.rs),
//! and its part of the expansion: the `FollowSpec` of the counter's `SPEC`, whose column names
//! are read through checks of the child table's columns (each a column of the child table, the
//! key columns of the counter's key type, the summed column an integer, the filter columns
//! booleans), spanned at the user's tokens.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Ident, LitInt, Path, Type};

use crate::ast::KeyType;
use crate::attr::{CounterAttr, FollowAttr, FOLLOW_FORM, THROUGH_FORM};
use crate::errors::Errors;
use crate::expand::respan;

/// A counter's `follow`, checked.
pub struct Follow {
    pub table: Ident,
    pub key_columns: Vec<Ident>,
    /// `record = 1`: the one record every child row counts for.
    pub record: Option<LitInt>,
    pub sum: Option<Ident>,
    pub filter: Vec<(Ident, bool)>,
    /// `through = posts(community_id)`: the table between, and its column that holds this
    /// model's key.
    pub through: Option<(Ident, Ident)>,
}

/// The counter's `follow`, `sum` and `filter`, checked against each other and against the
/// counter's keys that cannot go with a followed table. `Ok(None)`: the counter follows nothing.
/// `Err(())`: reported.
pub fn checked(
    attr: &CounterAttr<'_>,
    key: Option<&[KeyType]>,
    errors: &mut Errors,
) -> Result<Option<Follow>, ()> {
    let key_len = key.map(<[KeyType]>::len);
    let Some(follow) = &attr.follow else {
        if attr.follow_written {
            // A `follow` of the wrong form, reported where it was parsed.
            return Err(());
        }
        let mut wrong = false;
        if let Some(record) = &attr.record {
            errors.at(
                record,
                "`record` applies to a counter that follows a child table",
                "add the table whose every row counts for this record: `follow = comments, record = 1`",
            );
            wrong = true;
        }
        if let Some(sum) = &attr.sum {
            errors.at(
                sum,
                "`sum` applies to a counter that follows a child table",
                format_args!("add the table whose column it sums: `follow = post_votes(post_id), sum = {sum}`"),
            );
            wrong = true;
        }
        if let Some(through) = &attr.through {
            errors.at(
                &through.table,
                "`through` applies to a counter that follows a child table",
                format_args!("add the child table whose rows count through `{}`: `follow = comments(post_id), through = {}(community_id)`", through.table, through.table),
            );
            wrong = true;
        }
        if let Some(filter) = attr.filter.as_ref().and_then(|f| f.first()) {
            errors.at(
                &filter.column,
                "`filter` applies to a counter that follows a child table",
                "add the table whose rows it filters: `follow = comments(post_id), filter(not(deleted))`",
            );
            wrong = true;
        }
        return if wrong { Err(()) } else { Ok(None) };
    };
    let mut wrong = false;
    // What a followed counter cannot have: its slot is the trigger's, its counts the child
    // table's rows.
    let refused: [(Option<&dyn quote::ToTokens>, &str, &str); 5] = [
        (
            attr.bucket.as_ref().map(|b| b as _),
            "a counter that follows a child table has no time buckets",
            "remove `bucket`: the triggers count the child rows there are, not when they were written",
        ),
        (
            attr.strategy.as_ref().map(|s| s as _),
            "a counter that follows a child table takes its slot from the writing session",
            "remove `strategy`: the triggers write to the writer's slot, as `strategy = connection` does",
        ),
        (
            attr.prefill.as_ref().map(|p| p as _),
            "a counter that follows a child table has no pre-created slots",
            "remove `prefill`",
        ),
        (
            attr.storage.as_ref().filter(|s| *s == "shared").map(|s| s as _),
            "a counter that follows a child table needs a table of its own",
            "remove `storage = shared`",
        ),
        (
            attr.adopt.as_ref().map(|a| a as _),
            "a counter that follows a child table counts the child rows, not a column's counts",
            "remove `adopt`, and give the column as `cache`: the counter's migration counts the child rows already there, and the roll-up writes their totals into the column, whatever it held; drop the trigger that kept the column in a migration of your own (the guide's page on counters that follow a table, \"An aggregate column a trigger keeps\")",
        ),
    ];
    for (given, message, help) in refused {
        if let Some(given) = given {
            errors.at(given, message, help);
            wrong = true;
        }
    }
    match (&attr.record, follow.key_columns.is_empty()) {
        (None, true) => {
            errors.at(
                &follow.table,
                format_args!("`follow = {}` names no column that holds this model's key", follow.table),
                format_args!(
                    "{FOLLOW_FORM}; or, for a counter of one record that every row of `{0}` counts for (a site-wide count), give that record's key: `follow = {0}, record = 1`",
                    follow.table
                ),
            );
            wrong = true;
        }
        (Some(record), false) => {
            errors.at(
                record,
                "`record` is for a counter of one record, whose child rows name no parent",
                format_args!(
                    "remove `record` (each row of `{0}` counts for the record its columns name), or the columns: `follow = {0}, record = {record}`",
                    follow.table
                ),
            );
            wrong = true;
        }
        (Some(record), true)
            if key.is_some_and(|k| !matches!(k, [KeyType::I16 | KeyType::I32 | KeyType::I64])) =>
        {
            errors.at(
                record,
                "`record` names the record of an integer key",
                "a counter of one record needs a model keyed by one `i16`, `i32` or `i64` column",
            );
            wrong = true;
        }
        _ => {}
    }
    if let (Some(len), false) = (key_len, follow.key_columns.is_empty()) {
        if follow.key_columns.len() != len {
            let columns = if len == 1 {
                "one column".to_owned()
            } else {
                format!("{len} columns")
            };
            errors.at(
                &follow.table,
                format_args!(
                    "the model's key has {columns}, and `follow = {}(…)` names {}",
                    follow.table,
                    follow.key_columns.len()
                ),
                key_columns_help(&follow.table, len),
            );
            wrong = true;
        }
    }
    let through = match &attr.through {
        None => None,
        Some(through) => match through_checked(attr, follow, through, errors) {
            Some(checked) => Some(checked),
            None => {
                wrong = true;
                None
            }
        },
    };
    let filter: Vec<(Ident, bool)> = attr
        .filter
        .iter()
        .flatten()
        .map(|f| (f.column.clone(), f.value))
        .collect();
    for (i, (column, _)) in filter.iter().enumerate() {
        if filter[..i].iter().any(|(earlier, _)| earlier == column) {
            errors.at(
                column,
                format_args!("`{column}` is in `filter` twice"),
                "name each column once: `filter(local, not(deleted))`",
            );
            wrong = true;
        }
    }
    if wrong {
        return Err(());
    }
    Ok(Some(Follow {
        table: follow.table.clone(),
        key_columns: follow.key_columns.clone(),
        record: attr.record.clone(),
        sum: attr.sum.clone(),
        filter,
        through,
    }))
}

/// `through = posts(community_id)` against `follow`: one column of the table between, a child
/// table with one key column, no `record`, and not the child table itself. `None`: reported.
fn through_checked(
    attr: &CounterAttr<'_>,
    follow: &FollowAttr,
    through: &FollowAttr,
    errors: &mut Errors,
) -> Option<(Ident, Ident)> {
    let table = &through.table;
    if attr.record.is_some() {
        errors.at(
            table,
            "a counter of one record (`record`) counts every child row: it needs no table between",
            format_args!("remove `through = {table}(…)`, or `record` and give the child's column: `follow = {}(post_id), through = {table}(community_id)`", follow.table),
        );
        return None;
    }
    if follow.key_columns.len() > 1 {
        errors.at(
            table,
            "`through` passes one key column through a table between, and `follow` names several",
            "a count through a table between needs a model with a one-column key, and one column of the child table that holds the primary key of the table between",
        );
        return None;
    }
    if *table == follow.table {
        errors.at(
            table,
            format_args!("`through = {table}(…)` names the child table itself"),
            format_args!("name the table that the child's column `{}` points into: `through = posts(community_id)`", follow.key_columns.first().map_or_else(|| "post_id".to_owned(), ToString::to_string)),
        );
        return None;
    }
    match through.key_columns.as_slice() {
        [column] => Some((table.clone(), column.clone())),
        _ => {
            errors.at(
                table,
                format_args!(
                    "`through = {table}(…)` names one column, the one that holds this model's key"
                ),
                THROUGH_FORM,
            );
            None
        }
    }
}

/// The help for a `follow` that names a column count other than the key's `len`: the form, with
/// one column for each of the key's, in an example of that many.
fn key_columns_help(table: &Ident, len: usize) -> String {
    const CHILD: [&str; 3] = ["site_id", "post_id", "day"];
    const PARENT: [&str; 3] = ["site_id", "id", "day"];
    match len {
        1 => format!("name the one column of `{table}` that holds this model's key; {FOLLOW_FORM}"),
        2 | 3 => format!(
            "name a column of `{table}` for each column of the key, in the key's order: e.g. `follow = {table}({})` for a model with `#[diesel(primary_key({}))]`",
            CHILD[..len].join(", "),
            PARENT[..len].join(", "),
        ),
        _ => format!("name a column of `{table}` for each column of the key, in the key's order"),
    }
}

/// The counter's `follow: Option<FollowSpec>` in its `SPEC`. Each column's name is read through
/// a check of that column, spanned at the user's column: a column the child table lacks, a key
/// column of another type than `parent_keys` (the model's key columns, as paths), a summed
/// column that is not an integer or a filter column that is not a boolean fail there.
pub fn spec(
    follow: Option<&Follow>,
    parent_keys: &[TokenStream],
    key_ty: &Type,
    krate: &Path,
) -> TokenStream {
    let Some(follow) = follow else {
        return quote!(::core::option::Option::None);
    };
    let child = &follow.table;
    // Each column is read as `<<child::column as ChildColumn<child::table>>::SqlType as
    // Role>::CHECKED`, then its `NAME`: projections, whose errors point at the column alone (a
    // generic fn's bounds would add a note in slotted's source). Their tokens, the child table's
    // name among them, are spanned at the column; the model's key column's path keeps its own.
    // The table itself is looked up once, at its own tokens (below).
    let column = |name: &Ident, role: &dyn Fn(&TokenStream) -> TokenStream| {
        let span = name.span();
        let checks = respan(&quote!(#krate::__private::follow_check), span);
        let child = respan(child, span);
        let role = role(&checks);
        quote_spanned! {span=>
            {
                let () = <<#child::#name as #checks::ChildColumn<#child::table>>::SqlType as #role>::CHECKED;
                <#child::#name as #checks::ChildColumn<#child::table>>::NAME
            }
        }
    };
    let key_columns = follow.key_columns.iter().zip(parent_keys).map(|(name, parent_key)| {
        match &follow.through {
            // The child's column holds the key of the table between (its SQL type, a tuple's
            // for a key of several columns, which the table's own check reports).
            Some((table, _)) => {
                let span = name.span();
                let diesel = respan(&quote!(#krate::__private::diesel), span);
                let table = respan(table, span);
                column(name, &|checks| {
                    quote_spanned!(span=> #checks::ThroughKeyColumn<
                        <<#table::table as #diesel::Table>::PrimaryKey as #diesel::Expression>::SqlType
                    >)
                })
            }
            None => {
                let parent_column = respan(&quote!(#krate::__private::ParentColumn), name.span());
                column(name, &|checks| {
                    quote_spanned!(name.span()=> #checks::FollowKeyColumn<<#parent_key as #parent_column>::SqlType>)
                })
            }
        }
    });
    // The table between: its primary key's name (read at the table, which must have a
    // one-column key), and its column that holds the parent's key, of the key's type.
    let through = match (&follow.through, parent_keys.first()) {
        (Some((table, parent)), Some(parent_key)) => {
            let span = parent.span();
            let checks = respan(&quote!(#krate::__private::follow_check), span);
            let parent_column = respan(&quote!(#krate::__private::ParentColumn), span);
            // The table's one-column primary key, read at the table.
            let key = {
                let span = table.span();
                let checks = respan(&quote!(#krate::__private::follow_check), span);
                let diesel = respan(&quote!(#krate::__private::diesel), span);
                quote_spanned! {span=>
                    <<#table::table as #diesel::Table>::PrimaryKey as #checks::ThroughKey<#table::table>>
                }
            };
            let table_at_column = respan(table, span);
            let name = table.unraw().to_string();
            // The column, checked at the user's column (its tokens, the key column's path
            // apart, spanned there).
            let column = quote_spanned! {span=>
                {
                    let () = <<#table_at_column::#parent as #checks::ThroughColumn<#table_at_column::table>>::SqlType
                        as #checks::ThroughParentColumn<<#parent_key as #parent_column>::SqlType>>::CHECKED;
                    <#table_at_column::#parent as #checks::ThroughColumn<#table_at_column::table>>::NAME
                }
            };
            // Its paths, not an import of it as the child table's are: a `use` of a name that a
            // macro in the same module also defines (a `table!` beside a glob import of another
            // `posts`) is ambiguous to rustc.
            quote! {
                ::core::option::Option::Some(#checks::Through {
                    table: #name,
                    key: #key::NAME,
                    column: #column,
                })
            }
        }
        _ => quote!(::core::option::Option::None),
    };
    let sum = match &follow.sum {
        None => quote!(::core::option::Option::None),
        Some(name) => {
            let check = column(
                name,
                &|checks| quote_spanned!(name.span()=> #checks::SummedColumn),
            );
            quote!(::core::option::Option::Some(#check))
        }
    };
    let filter = follow.filter.iter().map(|(name, value)| {
        let check = column(
            name,
            &|checks| quote_spanned!(name.span()=> #checks::FilterColumn),
        );
        quote!((#check, #value))
    });
    let table = child.unraw().to_string();
    // The record's key, checked to be one of the model's key type (a literal out of its range
    // is rustc's own error, at the literal).
    let record = match &follow.record {
        None => quote!(::core::option::Option::None),
        Some(record) => {
            let check = respan(&quote!(const _: #key_ty = #record;), record.span());
            quote!(::core::option::Option::Some({ #check #record }))
        }
    };
    // The child table is imported once, at the user's tokens, then again under its own name for
    // the columns' paths: a table that does not resolve is one error, at the table (the failed
    // import stands in for it after), and a column it lacks one error at that column, whose
    // suggestions stay within it.
    let alias = quote_spanned!(child.span()=> __slotted_followed_table);
    quote! {
        ::core::option::Option::Some({
            #[allow(unused_imports)]
            use #child as #alias;
            {
                #[allow(unused_imports)]
                use #alias as #child;
                #krate::follow::FollowSpec {
                    table: #table,
                    key_columns: &[#(#key_columns),*],
                    record: #record,
                    sum: #sum,
                    filter: &[#(#filter),*],
                    through: #through,
                }
            }
        })
    }
}
