//! Counter and table names: each is also a Rust identifier (a method, a module), so they are
//! checked here rather than left to fail inside the expansion.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::Ident;

use crate::errors::Errors;

/// PostgreSQL cuts identifiers at 63 bytes, MySQL refuses more than 64.
pub(super) const MAX_TABLE_NAME: usize = 63;

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "gen", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// A name `checked_name` accepts, checked without reporting.
pub(super) fn is_plain_name(name: &Ident) -> bool {
    let text = name.to_string();
    !KEYWORDS.contains(&text.as_str())
        && !text.starts_with('_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn checked_name(name: &Ident, errors: &mut Errors) -> Option<Ident> {
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

pub(super) fn checked_table(table: &Ident, errors: &mut Errors) -> Option<Ident> {
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

/// Diesel's default table name: the struct name in snake_case, plus `s`.
pub(super) fn infer_table_name(name: &str) -> String {
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
pub(super) fn ident(text: &str, span: Span) -> Option<Ident> {
    let mut ident = Ident::parse_any.parse_str(text).ok()?;
    ident.set_span(span);
    Some(ident)
}
