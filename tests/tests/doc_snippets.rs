//! Every ```rust block of README.md and docs/guide/*.md, compiled (see `tests/build.rs`): a
//! snippet that no longer compiles fails this test target's build, with the file and line of the
//! block in the generated module's name. Compiled with every feature on, as the docs assume.
#![cfg(all(
    feature = "sqlite",
    feature = "postgres",
    feature = "mysql",
    feature = "async"
))]

/// What the snippets may use without declaring it: the models the docs talk about.
#[allow(unused_imports, missing_docs, dead_code)]
mod context {
    pub use diesel::prelude::*;
    pub use slotted_core::prelude::*;

    diesel::table! {
        posts (id) {
            id -> Integer,
            title -> Text,
            likes_count -> BigInt,
        }
    }

    diesel::table! {
        videos (id) {
            id -> BigInt,
        }
    }

    /// The docs' post: likes and views.
    #[derive(Debug, Clone, Queryable, Identifiable, SlottedCounter)]
    #[diesel(table_name = posts)]
    #[slotted(counter = likes, slots = 16)]
    #[slotted(counter = views, slots = 64)]
    pub struct Post {
        pub id: i32,
        pub title: String,
        pub likes_count: i64,
    }

    /// A second model, `i64`-keyed.
    #[derive(Debug, Clone, SlottedCounter)]
    #[slotted(counter = plays, slots = 8)]
    pub struct Video {
        pub id: i64,
    }
}

include!(concat!(env!("OUT_DIR"), "/doc_snippets.rs"));

/// The generated functions are compiled, not run; this keeps the target a test the runner lists.
#[test]
fn every_snippet_in_the_docs_compiles() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/doc_snippets.rs"));
    let snippets = generated.matches("pub async fn snippet()").count();
    assert!(
        snippets >= 10,
        "only {snippets} snippets found in README.md and docs/guide"
    );
}
