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
mod follow;
mod key;
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
/// One `#[slotted(…)]` attribute declares one counter; repeat it for more. Keys come in any
/// order, each at most once per attribute; an unknown key is an error (with "did you mean").
///
/// | key | required | default | values |
/// |---|---|---|---|
/// | `counter` | yes | | a snake_case identifier |
/// | `slots` | yes | | 1 to 1,024 |
/// | `table` | no | `{model table}_{counter}_slots` | an identifier, at most 63 characters |
/// | `max_key_length` | no | 255 | `String` keys: 1 to 767, or 765 with `bucket` |
/// | `strategy` | no | `connection` | `connection`, `thread`, `random` |
/// | `bucket` | no | none | `day`, `hour` |
/// | `prefill` | no | off | a flag, no value |
/// | `cache` | no | none | a `BigInt` column of the model's table |
/// | `storage` | no | `table` | `table`, `shared` |
/// | `crate` | no | `::slotted_core` | a path |
///
/// ## Required keys
///
/// * `counter = likes`: the counter's name, which names its methods `likes()`, `likes_of(key)`
///   and `likes_totals(keys, conn)`; they must not clash with another counter's. A plain
///   snake_case identifier: not a keyword, not raw (`r#…`), not starting with `_`.
///
///   ```ignore
///   #[slotted(counter = likes, slots = 16)]
///   #[slotted(counter = views, slots = 64)]
///   pub struct Post { pub id: i32 }
///   ```
///
/// * `slots = 16`: how many slot rows one record's count is spread over, an integer literal from
///   1 to 1,024 ([`MAX_SLOTS`]). Every read sums up to `slots` rows, and past a few hundred
///   concurrent writers the database, not the row lock, is the limit, so more buys nothing;
///   16 to 128 suits most hot counters.
///
/// ## Optional keys
///
/// * `table = post_like_slots`: the counter table, and the Rust module its Diesel `table!` is
///   declared in. Default: `{model table}_{counter}_slots` (`posts_likes_slots`). ASCII letters,
///   digits and `_`, at most 63 characters (PostgreSQL's limit), not a Rust keyword; no two
///   counters of a model may share one. Not with `storage = shared`.
///
///   ```ignore
///   #[slotted(counter = likes, slots = 16, table = post_like_slots)]
///   ```
///
/// * `max_key_length = 512`: for a `String` key, the longest key in characters. It sizes the
///   MySQL column, `VARCHAR(512) CHARACTER SET utf8mb4`; a longer key is refused at run time on
///   every backend, before anything is sent. Default: 255. At most 767, or 765 for a counter
///   with `bucket` ([`MAX_KEY_LENGTH`], [`MAX_BUCKETED_KEY_LENGTH`]): MySQL and MariaDB index at
///   most 3,072 bytes of a primary key, a `utf8mb4` character takes 4, `slot` 2 and `bucket` 8.
///   An integer key takes no `max_key_length`. On PostgreSQL the key is `TEXT`, and a btree entry
///   holds at most 2,704 bytes: a key of more than about 2,690 bytes (672 four-byte characters,
///   669 beside a `bucket`) that does not compress fails there with a database error.
///
///   ```ignore
///   #[derive(SlottedCounter)]
///   #[diesel(table_name = pages, primary_key(url))]
///   #[slotted(counter = views, slots = 4, max_key_length = 512)]
///   pub struct Page { pub url: String }
///   ```
///
/// * `strategy = thread`: how a write picks its slot. Default: `connection`, a slot per
///   database connection, chosen by the server (`pg_backend_pid() % slots`,
///   `MOD(CONNECTION_ID(), …)`, node-aware on a Galera cluster), which holds for threads with an
///   r2d2 pool, tasks with a bb8 or deadpool pool, several processes and several nodes; on
///   SQLite it writes like `thread`. `thread` is the slot of the writing thread (a distinct one
///   per live thread while there are no more threads than slots), which does not hold under
///   async runtimes; `random` draws one per write. See `slotted_core::SlotStrategy`.
///
///   ```ignore
///   #[slotted(counter = views, slots = 64, strategy = random)]
///   ```
///
/// * `bucket = day` (or `hour`): a count per UTC day or hour beside the all-time total, with
///   `at`, `bucket_total` and `total_between` on the counter and `delete_buckets_before` and
///   `fold_buckets_before` on its table. Default: none, a single all-time count. The table's
///   primary key becomes `(record_id, bucket, slot)`. Not with `prefill` or `storage = shared`.
///
///   ```ignore
///   #[slotted(counter = downloads, slots = 8, bucket = day)]
///   ```
///
/// * `prefill`: increments first try a plain `UPDATE` of slot rows made up front by
///   `create_slots`, and fall back to the upsert. Default: off. A flag without a value; not
///   with `bucket`.
///
///   ```ignore
///   #[slotted(counter = likes, slots = 16, prefill)]
///   ```
///
/// * `cache = likes_count`: a column of the model's own Diesel table that `refresh_cache` copies
///   the total into. It must be `BigInt` or `Integer`, which is checked at compile time; the
///   first roll-up takes it over only if every row holds 0 there. Default: none.
///
///   ```ignore
///   diesel::table! { posts (id) { id -> Integer, likes_count -> BigInt, } }
///
///   #[derive(SlottedCounter)]
///   #[diesel(table_name = posts)]
///   #[slotted(counter = likes, slots = 16, cache = likes_count)]
///   pub struct Post { pub id: i32, pub likes_count: i64 }
///   ```
///
/// * `adopt = likes_count`: an existing counter column of the model's own table (`BigInt` or
///   `Integer`) that old code still bumps: a total is that column plus the slots, until
///   `absorb_all` moves the column into the slots. With `cache` on the same column, the column
///   becomes the roll-up's cache once absorbed. Not with `bucket`. Default: none.
///
///   ```ignore
///   #[slotted(counter = likes, slots = 16, adopt = likes_count, cache = likes_count)]
///   ```
///
/// * `storage = shared`: keep the counter in the one `slotted_counters` table shared by every
///   such counter, under `record_type = "{model table}.{counter}"`. Default: `table`, a table per
///   counter. `i32` and `i64` keys only; not with `bucket` or `table`. The counter's type is
///   then `{model table}_{counter}::counter` (a marker; the rows are in
///   `slotted_core::shared::slotted_counters`).
///
///   ```ignore
///   #[slotted(counter = saves, slots = 8, storage = shared)]
///   ```
///
/// * `crate = slotted`: the path slotted-core is reachable at, when `Cargo.toml` renames it
///   (`slotted = { package = "slotted-core", … }`). Default: `::slotted_core`. Once per model,
///   in an attribute of its own or in a counter's.
///
///   ```ignore
///   #[slotted(crate = slotted)]
///   #[slotted(counter = likes, slots = 16)]
///   pub struct Post { pub id: i32 }
///   ```
///
/// ## Diesel's attributes it reads
///
/// The derive reads Diesel's own `#[diesel(…)]` with Diesel's defaults; the model needs no
/// Diesel derive to carry it, and everything else there is left to Diesel's derives.
///
/// * `#[diesel(table_name = posts)]` (or a path, `crate::schema::posts`): the model's table,
///   which starts the counter tables' names. Default: the struct's name in snake_case plus `s`
///   (`BlogPost` → `blog_posts`). With `cache` or `adopt`, its `table!` must be in scope: a
///   default-named one that is not is one error naming the table looked for. A model declared
///   inside a function whose table is declared or imported in that function names it, even by
///   its default name.
/// * `#[diesel(primary_key(url))]`: the field that keys the counters. Default: `id`. One field of
///   type `i16`, `i32`, `i64`, `u32`/`u64` (MySQL's `UNSIGNED`), `String`, `uuid::Uuid`
///   (PostgreSQL, slotted-core's `uuid` feature), `chrono::NaiveDate` (its `chrono` feature) or
///   a newtype over one that derives
///   [`SlottedKey`]; or a composite key of two or three such fields,
///   `#[diesel(primary_key(person_id, post_id))]`, whose counters are keyed by the tuple of their
///   types in that order (`likes_of((7, 42))`). The type system decides (`CounterKey`): a key
///   type that keys nothing is one error, at the key field, naming the types that do.
/// * `#[diesel(column_name = post_id)]` on the key field: its column, for `cache`. Default: the
///   field's name.
///
/// # What it generates
///
/// For each counter, next to the struct:
/// - a Diesel `table!` named after the counter table, with columns `record_id` (the key's SQL
///   type; `record_id`, `record_id_2`[, `record_id_3`] for a composite key), `bucket` (`BigInt`, bucketed counters only), `slot` (`SmallInt`) and `count`
///   (`BigInt`), the primary key being all but `count`; for `storage = shared`, a module named
///   `{model table}_{counter}` holding the marker type `counter` instead;
/// - `impl CounterTable` for that table type (its [`CounterSpec`]), and `BucketedCounterTable`,
///   `PrefilledCounterTable` or `CachedCounterTable` where the counter has that feature, so the
///   calls a counter does not support do not compile;
/// - on the model: `fn likes(&self) -> Counter<'_, posts_likes_slots::table>`,
///   `fn likes_of(key: impl IntoCounterKey<i32>) -> Counter<'static, …>` (any key that converts
///   `Into<i32>`) and
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
/// generated method; an enum, union, tuple, unit or generic struct; a missing primary key, or a
/// composite one of more than three columns or with a field of a tuple type; and combinations
/// that cannot work (`prefill` with `bucket`, `storage = shared` with a `String` or composite
/// key, a `bucket` or a `table`). A newtype key, whose inner key the derive
/// cannot see, is checked by the type system at the attribute's value (`max_key_length` on a
/// newtype over an integer, `storage = shared` over a `String`). Those errors are all the
/// build reports: beside them the derive still declares every counter whose name and table are
/// sound (a bad value replaced by its default), and for every other counter an attribute names
/// (`counter: likes`, a bad table, a missing key field) the three methods as stubs
/// that accept any call, so the code that uses the counters does not fail as well (as
/// thiserror's fallback does).
///
/// At the call site: a counter that was not declared has no method; a key of the wrong type says
/// which type the counter is keyed by ("this counter is keyed by `i32`, not by `i64`";
/// `likes_of` takes any key that converts `Into` it, `likes_totals` takes `&[Key]`); bucket,
/// cache and prefill calls compile only on counters declared with them, and otherwise say which
/// key to declare ("the counter `posts_likes_slots::table` has no time buckets"); a pool passed
/// for a connection says to pass `&mut pool.get()?`; and a connection whose backend's
/// slotted-core feature is off fails with "slotted counters are not enabled for the `Pg`
/// backend" and the features that are off.
///
/// [`MAX_SLOTS`]: https://docs.rs/slotted-core/latest/slotted_core/constant.MAX_SLOTS.html
/// [`MAX_KEY_LENGTH`]: https://docs.rs/slotted-core/latest/slotted_core/constant.MAX_KEY_LENGTH.html
/// [`MAX_BUCKETED_KEY_LENGTH`]: https://docs.rs/slotted-core/latest/slotted_core/constant.MAX_BUCKETED_KEY_LENGTH.html
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
            out.extend(invalid.fallback.as_deref().map(expand::expand_fallback));
            out
        }
    }
}

/// A newtype key: `#[derive(SlottedKey)]` on a struct of one field whose type keys a counter
/// (`i16`, `i32`, `i64`, `u32`, `u64`, `String`, `uuid::Uuid`, or another such newtype) lets a
/// model keyed by it take counters (the guide's `counters.md` has this example, compiled).
///
/// ```ignore
/// use slotted_core::{SlottedCounter, SlottedKey};
///
/// // As diesel-derive-newtype's `DieselNewType` or hand-written `ToSql`/`FromSql` make them.
/// #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, SlottedKey)]
/// pub struct PostId(i32);
///
/// #[derive(SlottedCounter)]
/// #[slotted(counter = likes, slots = 16)]
/// pub struct Post {
///     pub id: PostId,
/// }
/// ```
///
/// The key is stored and bound as its inner key: its counter table's `record_id` has the inner
/// key's SQL type on each backend, and every counter call takes and returns the newtype
/// (`Post::likes_of(PostId(7))`, `Post::likes_totals(&[PostId(7)], conn)`). It needs `Clone`,
/// `Eq`, `Hash`, `Send` and `Sync`, as totals come back in a `HashMap` keyed by it.
///
/// A struct of more or fewer than one field, a generic struct, an enum or a union is refused
/// with a compile error at the struct; a field whose type keys nothing is refused at the field,
/// with the types that do. `#[slotted(crate = path)]` names a renamed slotted-core.
#[proc_macro_derive(SlottedKey, attributes(slotted))]
pub fn derive_slotted_key(input: TokenStream) -> TokenStream {
    match syn::parse::<syn::DeriveInput>(input) {
        Ok(input) => key::derive(&input).into(),
        Err(e) => e.to_compile_error().into(),
    }
}
