//! No input makes the derive panic. Odd identifiers, malformed attributes and out-of-range values
//! are each either expanded or reported as compile errors, every one lowercase and with a
//! `help:` line. (The UI suite in `tests/ui` shows how rustc prints the common ones.)

use proc_macro2::TokenStream;

/// Inputs that must come back as errors, never as a panic or as silently accepted code.
const REFUSED: &[&str] = &[
    "#[slotted(crate = slotted)] struct Post { id: i32 }",
    "#[slotted] struct Post { id: i32 }",
    "#[slotted = \"likes\"] struct Post { id: i32 }",
    "#[slotted()] struct Post { id: i32 }",
    "#[slotted(counter)] struct Post { id: i32 }",
    "#[slotted(counter = likes slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16,, table = t)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = )] struct Post { id: i32 }",
    "#[slotted(a::b = 1, counter = likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = r#likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = _likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = ünïcode, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = -1)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 99999999999999999999999999)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16.0)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, table = r#type)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, table = tåble)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, table = type)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, table = _)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, prefill = true)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, adopt = likes_count, bucket = day)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, adopt = 5)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, adopt = a, adopt = b)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, adopt = n)] #[slotted(counter = views, slots = 16, adopt = n)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, adopt = n)] #[slotted(counter = views, slots = 16, cache = n)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, cache = n)] #[slotted(counter = views, slots = 16, adopt = n)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, prefill(x))] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, cache = 5)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, strategy = \"random\")] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, storage = disk)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, bucket = day, storage = shared, table = x)] struct Post { id: i32 }",
    "#[slotted(crate = \"x\", counter = likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16)] #[slotted(crate = a)] #[slotted(crate = b)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16)] #[diesel(primary_key())] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16)] #[diesel(primary_key(a, b, c, d))] struct Post { a: i32, b: i32, c: i32, d: i32 }",
    "#[slotted(counter = likes, slots = 16)] #[diesel(primary_key(a, x))] struct Post { a: i32, b: i32 }",
    "#[slotted(counter = likes, slots = 16, storage = shared)] #[diesel(primary_key(a, b))] struct Post { a: i32, b: i32 }",
    "#[slotted(counter = likes, slots = 16, max_key_length = 9)] #[diesel(primary_key(a, b))] struct Post { a: i32, b: i64 }",
    "#[slotted(counter = likes, slots = 16)] struct Post { id: (i32, i64) }",
    "#[slotted(counter = likes, slots = 16, max_key_length = 0)] #[diesel(primary_key(url))] struct Page { url: String }",
    "#[slotted(counter = likes, slots = 16, max_key_length = 100000)] #[diesel(primary_key(url))] struct Page { url: String }",
    "#[slotted(counter = a_counter_name_long_enough_to_make_the_table_name_too_long, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16)] struct Post<'a> { id: i32, t: &'a str }",
    "#[slotted(counter = likes, slots = 16)] union Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16)] enum Post<T> { A(T) }",
    "#[slotted(counter = likes, slots = 16)] struct Post {}",
    "#[slotted(counter = likes, slots = 16)] #[slotted(counter = likes, slots = 16)] #[slotted(counter = likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter: likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter == likes)] struct Post { id: i32 }",
    "#[slotted(counter: fn, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter: r#likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(slots = 16, counter:)] struct Post { id: i32 }",
    "#[slotted(slots = 16, counter: ,)] struct Post { id: i32 }",
    "#[slotted(counter: likes, slots = 16)] #[slotted(counter = likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter: likes_of, slots = 16)] #[slotted(counter = likes, slots = 16)] struct Post { id: i32 }",
    "#[slotted(counter = likes, slots = 16, bucket = day, max_key_length = 766)] #[diesel(primary_key(url))] struct Page { url: String }",
    "#[slotted(counter = likes, slots = 16, bucket = week, max_key_length = 766)] #[diesel(primary_key(url))] struct Page { url: String }",
    "#[slotted(counter = likes, slots = 16, max_key_length = 768)] #[diesel(primary_key(url))] struct Page { url: String }",
];

/// Key types the derive leaves to the type system (`CounterKey`, one error at the field: the UI
/// tests `unsupported-key-type` and `newtype-key`): it expands them with no error of its own.
const KEYED_BY_THE_TYPE_SYSTEM: &[&str] = &[
    "#[slotted(counter = likes, slots = 16)] struct Post { id: Option<i32> }",
    "#[slotted(counter = likes, slots = 16)] struct Post { id: &'static str }",
    "#[slotted(counter = likes, slots = 16)] struct Post { id: Ulid }",
    "#[slotted(counter = likes, slots = 16, max_key_length = 64, storage = shared)] struct Post { id: ids::PostId }",
    "#[slotted(counter = likes, slots = 16)] #[diesel(primary_key(a, b))] struct Post { a: Ulid, b: f64 }",
];

#[test]
fn key_types_are_left_to_the_type_system() {
    for input in KEYED_BY_THE_TYPE_SYSTEM {
        let expansion = expand(input);
        assert_eq!(errors(&expansion), Vec::<String>::new(), "{input}");
        assert!(
            expansion
                .to_string()
                .contains("impl :: slotted_core :: CounterTable"),
            "{input}"
        );
    }
}

/// Inputs with errors whose fallback must still declare these methods, each exactly once, so
/// that their uses compile.
const STUBBED: &[(&str, &[&str])] = &[
    ("#[slotted(counter: likes, slots = 16)] struct Post { id: i32 }", &["likes", "likes_of", "likes_totals"]),
    ("#[slotted(counter = likes slots = 16)] struct Post { id: i32 }", &["likes", "likes_of", "likes_totals"]),
    (
        "#[diesel(primary_key(a, b, c, d))] #[slotted(counter = likes, slots = 16)] #[slotted(counter = views, slots = 4)] struct Post { a: i32, b: i32, c: i32, d: i32 }",
        &["likes", "likes_of", "likes_totals", "views", "views_of", "views_totals"],
    ),
    ("#[slotted(counter = likes, slots = 16, table = r#type)] struct Post { id: i32 }", &["likes", "likes_of", "likes_totals"]),
    (
        "#[slotted(counter: likes, slots = 16)] #[slotted(counter = likes, slots = 16)] struct Post { id: i32 }",
        &["likes", "likes_of", "likes_totals"],
    ),
    (
        "#[slotted(counter: views, slots = 16)] #[slotted(counter = likes, slots = 0)] struct Post { id: i32 }",
        &["likes", "likes_of", "likes_totals", "views", "views_of", "views_totals"],
    ),
];

/// Odd but valid inputs, and the counter table each must declare.
const ACCEPTED: &[(&str, &str)] = &[
    // A raw identifier names the table without its `r#`, as in SQL.
    (
        "#[slotted(counter = likes, slots = 16)] struct r#Post { id: i32 }",
        "posts_likes_slots",
    ),
    (
        "#[diesel(table_name = r#match)] #[slotted(counter = likes, slots = 16)] struct Post { id: i32 }",
        "match_likes_slots",
    ),
    (
        "#[slotted(counter = likes, slots = 16, storage = shared)] struct r#Post { id: i32 }",
        "posts_likes",
    ),
    (
        "#[diesel(primary_key(r#type))] #[slotted(counter = likes, slots = 16)] struct Post { r#type: i32 }",
        "posts_likes_slots",
    ),
    (
        "#[slotted(counter = likes, slots = 16)] struct Pöst { id: i32 }",
        "pösts_likes_slots",
    ),
    (
        "#[slotted(counter = likes, slots = 0x10)] struct Post { id: i32 }",
        "posts_likes_slots",
    ),
    // Composite keys, of known and unknown column types, the key fields in any order.
    (
        "#[diesel(primary_key(b, a))] #[slotted(counter = likes, slots = 16, max_key_length = 9)] struct Like { a: i32, b: String }",
        "likes_likes_slots",
    ),
    (
        "#[diesel(primary_key(person_id, post_id, day))] #[slotted(counter = likes, slots = 16, cache = n)] struct Like { person_id: PersonId, post_id: i64, day: i16 }",
        "likes_likes_slots",
    ),
    (
        "#[diesel(table_name = crate::schema::posts)] #[slotted(counter = likes, slots = 1024)] pub(crate) struct Post { id: ::std::string::String }",
        "posts_likes_slots",
    ),
];

fn expand(input: &str) -> TokenStream {
    let tokens: TokenStream = input.parse().unwrap();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::derive_inner(tokens)))
        .unwrap_or_else(|_| panic!("the derive panicked on {input}"))
}

/// The messages of the `compile_error!`s in an expansion.
fn errors(expansion: &TokenStream) -> Vec<String> {
    let file: syn::File = syn::parse2(expansion.clone()).unwrap();
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Macro(m) if m.mac.path.segments.last()?.ident == "compile_error" => {
                Some(m.mac.parse_body::<syn::LitStr>().unwrap().value())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn malformed_input_is_an_error_with_help_never_a_panic() {
    for input in REFUSED {
        let messages = errors(&expand(input));
        assert!(!messages.is_empty(), "accepted: {input}");
        for message in messages {
            assert!(
                message.contains("\n\nhelp: "),
                "no help line for {input}: {message}"
            );
            assert!(
                !message.starts_with(|c: char| c.is_uppercase()),
                "not lowercase for {input}: {message}"
            );
        }
    }
}

#[test]
fn the_fallback_declares_every_named_counter_once() {
    for (input, methods) in STUBBED {
        let expansion = expand(input);
        assert!(!errors(&expansion).is_empty(), "accepted: {input}");
        let text = expansion.to_string();
        for method in *methods {
            let declared = text.matches(&format!("fn {method} ")).count()
                + text.matches(&format!("fn {method}<")).count();
            assert_eq!(
                declared, 1,
                "`{method}` declared {declared} times for {input}: {text}"
            );
        }
        assert_eq!(
            text.matches("SlottedModel for").count(),
            1,
            "{input}: {text}"
        );
    }
}

#[test]
fn odd_but_valid_input_expands() {
    for (input, table) in ACCEPTED {
        let expansion = expand(input);
        assert_eq!(errors(&expansion), Vec::<String>::new(), "{input}");
        let text = expansion.to_string();
        assert!(
            text.contains(&format!("\"{table}\"")) || text.contains(&format!("{table} ::")),
            "{input}: no table `{table}` in {text}"
        );
    }
}
