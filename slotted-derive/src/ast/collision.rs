//! Counters that clash with one another: the same name, table, generated method or adopted
//! column. Checked once every counter is built, since each is sound alone.

use std::collections::HashMap;

use syn::Ident;

use super::{Counter, Model};
use crate::errors::Errors;

/// Counters whose names, tables or generated methods would clash with an earlier counter's:
/// reported, and returned by index.
pub(super) fn check_collisions(counters: &[Counter], errors: &mut Errors) -> Vec<usize> {
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

/// The stubs whose methods no declared counter or earlier stub generates already.
pub(super) fn distinct_stubs(model: Option<&Model<'_>>, stubs: Vec<Ident>) -> Vec<Ident> {
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
