//! The `#[derive(SlottedCounter)]` macro. Depend on `slotted-core`, which re-exports it and
//! documents it; this crate is only the entry point.
//!
//! `parse` reads the attributes into a checked `ast::Model`, collecting every error; `expand`
//! writes the code. With errors, it writes them and the code of a fallback model (the sound
//! counters), so the errors are all the user sees.

mod ast;
mod attr;
mod errors;
mod expand;
#[cfg(test)]
mod no_panic;
#[cfg(test)]
mod snapshots;

use proc_macro::TokenStream;

/// Adds slotted counters to a Diesel model: per counter a counter table, its migration, and
/// typed methods that spread each record's count over N slot rows.
///
/// ```ignore
/// use slotted_core::SlottedCounter;
///
/// #[derive(Queryable, Identifiable, SlottedCounter)]
/// #[diesel(table_name = posts)]
/// #[slotted(counter = likes, slots = 16)]
/// #[slotted(counter = views, slots = 64, strategy = random)]
/// pub struct Post { pub id: i32, pub title: String }
///
/// conn.run_pending_migrations(CounterMigrations::of::<Post>())?;
/// post.likes().increment(&mut conn)?;
/// let views: i64 = Post::views_of(42).total(&mut conn)?;
/// let likes: HashMap<i32, i64> = Post::likes_totals(&[1, 2, 3], &mut conn)?;
/// ```
///
/// # Attributes
///
/// ## Required attributes
///
/// * `#[slotted(counter = likes, slots = 16)]`, once per counter: declares the counter `likes`,
///   each record's count spread over 16 slot rows.
///   - `counter` is a plain snake_case identifier (not a keyword, not raw, not starting with
///     `_`). It names the generated methods `likes()`, `likes_of(key)` and
///     `likes_totals(keys, conn)`, which must not clash with another counter's.
///   - `slots` is an integer literal from 1 to 1,024 ([`MAX_SLOTS`]). Every read sums up to
///     `slots` rows, and past a few hundred concurrent writers the database, not the row lock,
///     is the limit, so more buys nothing; 16 to 128 suits most hot counters.
///
/// ## Optional counter attributes
///
/// Added to a counter's own attribute, in any order, each at most once:
///
/// * `#[slotted(counter = likes, slots = 16, table = post_like_slots)]`: the counter table.
///   Default: `{model table}_{counter}_slots` (`posts_likes_slots`). ASCII letters, digits and
///   `_`, at most 63 characters (PostgreSQL's limit), not a Rust keyword (it also names a module);
///   no two counters of a model may share one.
/// * `#[slotted(counter = likes, slots = 16, strategy = random)]`: how a write picks its slot.
///   Default: `thread`, a slot per live thread of the process; `random` draws one per write.
/// * `#[slotted(counter = downloads, slots = 8, bucket = day)]`: a count per UTC `day` or `hour`
///   beside the all-time total, with `at`, `bucket_total` and `total_between`. Default: none.
/// * `#[slotted(counter = likes, slots = 16, prefill)]`: increments first try a plain `UPDATE` of
///   slot rows made up front by `create_slots`. Default: off. Not with `bucket`.
/// * `#[slotted(counter = likes, slots = 16, cache = likes_count)]`: a column of the model's own
///   Diesel table that `refresh_cache` copies the total into; it must be `BigInt`, which is
///   checked at compile time. Default: none.
/// * `#[slotted(counter = likes, slots = 16, storage = shared)]`: keep the counter in the one
///   `slotted_counters` table shared by every such counter. Default: `table`, a table per
///   counter. Integer keys only; not with `bucket` or `table`.
/// * `#[slotted(counter = views, slots = 4, max_key_length = 512)]`: `String` keys only, the
///   longest key in characters, from 1 to 767 (MySQL indexes at most 767 `utf8mb4` characters
///   in a key). Default: 255. It sizes the MySQL `VARCHAR`; longer keys are refused at run time
///   on every backend.
///
/// ## Optional model attribute
///
/// * `#[slotted(crate = slotted)]`: the path slotted-core is reachable at, when `Cargo.toml`
///   renames it (`slotted = { package = "slotted-core", … }`). Default: `::slotted_core`. Once
///   per model, in an attribute of its own or in a counter's.
///
/// ## Diesel's attributes it reads
///
/// The derive reads Diesel's own `#[diesel(…)]` with Diesel's defaults; the model needs no
/// Diesel derive to carry it, and everything else there is left to Diesel's derives.
///
/// * `#[diesel(table_name = posts)]` (or a path, `crate::schema::posts`): the model's table,
///   which starts the counter tables' names. Default: the struct's name in snake_case plus `s`
///   (`BlogPost` → `blog_posts`).
/// * `#[diesel(primary_key(url))]`: the field that keys the counters. Default: `id`. One field of
///   type `i32`, `i64` or `String`; a composite key is an error.
/// * `#[diesel(column_name = post_id)]` on the key field: its column, for `cache`. Default: the
///   field's name.
///
/// # What it generates
///
/// For each counter, next to the struct:
/// - a Diesel `table!` named after the counter table, with columns `record_id` (the key's SQL
///   type), `bucket` (`BigInt`, bucketed counters only), `slot` (`SmallInt`) and `count`
///   (`BigInt`), the primary key being all but `count`; for `storage = shared`, a module named
///   `{model table}_{counter}` holding the marker type `counter` instead;
/// - `impl CounterTable` for that table type (its [`CounterSpec`]), and `BucketedCounterTable`,
///   `PrefilledCounterTable` or `CachedCounterTable` where the counter has that feature, so the
///   calls a counter does not support do not compile;
/// - on the model: `fn likes(&self) -> Counter<'_, posts_likes_slots::table>`,
///   `fn likes_of(key: impl Into<i32>) -> Counter<'static, …>` and
///   `fn likes_totals(keys: &[i32], conn) -> Result<HashMap<i32, i64>>`.
///
/// For the model, `impl SlottedModel`, which lists its counters for [`CounterMigrations`].
///
/// The code reaches slotted-core through `::slotted_core` (or `crate = …`) and Diesel through
/// slotted-core's re-export, so a module of yours named `diesel` does not confuse it, and it
/// compiles under `#![deny(warnings, missing_docs, clippy::all, unused_qualifications)]`.
/// Diesel's `table!` itself expands to `use ::diesel;`, so, like every Diesel schema, it expects
/// `diesel` among the crate's dependencies.
///
/// # Compile-time checks
///
/// Every mistake in these attributes is a compile error at the mistaken token, with a `help:`
/// line that shows the right form, and all of them are reported at once: no `#[slotted]`
/// counter; an unknown or repeated key; a missing `counter` or `slots`; a value out of range or
/// of the wrong kind; a keyword or raw identifier as a name; two counters sharing a table or a
/// generated method; an enum, union, tuple, unit or generic struct; a missing, composite or
/// unsupported primary key; and combinations that cannot work (`prefill` with `bucket`,
/// `storage = shared` with a `String` key, a `bucket` or a `table`). Those errors are all the
/// build reports: beside them the derive still declares every counter whose name and table are
/// sound (a bad value replaced by its default), so the code that uses the counters does not fail
/// as well.
///
/// At the call site: a counter that was not declared has no method; a key of the wrong type does
/// not convert (`likes_of` takes `impl Into<Key>`, `likes_totals` takes `&[Key]`); bucket,
/// cache and prefill calls exist only on counters declared with them; and a connection whose
/// backend's slotted-core feature is off fails with "slotted counters are not enabled for the
/// `Pg` backend" and the feature to enable.
///
/// [`MAX_SLOTS`]: https://docs.rs/slotted-core/latest/slotted_core/constant.MAX_SLOTS.html
/// [`CounterSpec`]: https://docs.rs/slotted-core/latest/slotted_core/struct.CounterSpec.html
/// [`CounterMigrations`]: https://docs.rs/slotted-core/latest/slotted_core/struct.CounterMigrations.html
#[proc_macro_derive(SlottedCounter, attributes(slotted, diesel))]
pub fn derive_slotted_counter(input: TokenStream) -> TokenStream {
    derive_inner(input.into()).into()
}

/// The derive on token streams, for expansion tests.
fn derive_inner(input: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let input = match syn::parse2::<syn::DeriveInput>(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    match ast::Model::from_syn(&input) {
        Ok(model) => expand::expand(&model),
        Err(invalid) => {
            let mut out = invalid.errors.to_compile_error();
            out.extend(invalid.fallback.as_ref().map(expand::expand_fallback));
            out
        }
    }
}
