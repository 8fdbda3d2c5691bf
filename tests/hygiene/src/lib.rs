//! A user crate as strict as they come, with every kind of counter: the derive's expansion must
//! compile here without a warning, reach slotted-core under its renamed name, and not be confused
//! by a module of the user's own called `diesel`.
#![deny(warnings, missing_docs, clippy::all, unused_qualifications)]
#![forbid(unsafe_code)]

use slotted::SlottedCounter;

/// The user's own module named like the crate: generated code must not resolve `diesel` to it.
pub mod diesel {
    /// Not Diesel.
    pub fn connect() {}
}

/// User types named like the standard ones the expansion uses: it must name its own absolutely.
pub mod shadows {
    /// Not `std::result::Result`.
    pub type Result<T> = ::core::result::Result<T, ()>;
    /// Not `std::option::Option`.
    pub struct Option;
    /// Not `std::string::String`.
    pub struct String;
    /// Not `std::collections::HashMap`.
    pub struct HashMap;
    /// Not `std::convert::Into`.
    pub trait Into {}
    /// Not `core`.
    pub mod core {}
}
#[allow(unused_imports)]
use shadows::*;

::diesel::table! {
    /// The posts.
    posts (id) {
        /// Key.
        id -> Integer,
        /// The rolled-up likes.
        likes_count -> BigInt,
    }
}

/// A post with every kind of counter.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(crate = slotted)]
#[slotted(counter = likes, slots = 16, cache = likes_count)]
#[slotted(counter = views, slots = 64, strategy = random, bucket = day)]
#[slotted(counter = shares, slots = 4, prefill)]
#[slotted(counter = saves, slots = 8, storage = shared)]
pub struct Post {
    /// Key.
    pub id: i32,
}

/// A page counted by URL.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = pages, primary_key(url))]
#[slotted(crate = slotted, counter = hits, slots = 8, max_key_length = 512)]
pub struct Page {
    /// Key.
    pub url: ::std::string::String,
}

/// A public newtype key, over a text key, under the renamed crate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, slotted::SlottedKey)]
#[slotted(crate = slotted)]
pub struct Slug(pub ::std::string::String);

/// A public newtype key, with a named field, over an integer newtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, slotted::SlottedKey)]
#[slotted(crate = slotted)]
pub struct TopicId {
    /// The inner key.
    pub raw: RawTopicId,
}

/// An integer newtype key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, slotted::SlottedKey)]
#[slotted(crate = slotted)]
pub struct RawTopicId(pub i32);

/// A topic, keyed by a newtype, with a counter in its own table, one in the shared table and
/// one with a key length of its own on a text newtype.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = topics)]
#[slotted(crate = slotted, counter = follows, slots = 4)]
#[slotted(counter = mutes, slots = 2, storage = shared)]
pub struct Topic {
    /// Key.
    pub id: TopicId,
}

/// A tag keyed by a text newtype.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = tags, primary_key(slug))]
#[slotted(crate = slotted, counter = uses, slots = 4, max_key_length = 100)]
pub struct Tag {
    /// Key.
    pub slug: Slug,
}

/// A follow of a topic by a person: a composite key of a newtype and a text key, with a
/// cached roll-up into the model's table and a key length of its own.
#[derive(Debug, SlottedCounter)]
#[diesel(table_name = follows, primary_key(topic, person))]
#[slotted(crate = slotted, counter = visits, slots = 4, cache = visits_count)]
#[slotted(counter = reads, slots = 2, max_key_length = 40, bucket = day)]
pub struct Follow {
    /// Key, second column.
    pub person: ::std::string::String,
    /// Key, first column.
    pub topic: TopicId,
}

::diesel::table! {
    /// The follows.
    follows (topic, person) {
        /// Key, first column.
        topic -> Integer,
        /// Key, second column.
        person -> Text,
        /// The rolled-up visits.
        visits_count -> BigInt,
    }
}

/// A private model in a private module: the expansion must not leak or warn either.
mod private {
    use slotted::SlottedCounter;

    #[derive(SlottedCounter)]
    #[slotted(crate = slotted, counter = clicks, slots = 2)]
    pub(crate) struct Banner {
        pub(crate) id: i64,
    }

    pub(crate) fn banner(id: i64) -> Banner {
        Banner { id }
    }

    ::diesel::table! {
        badges (id) {
            id -> BigInt,
            clicks_count -> BigInt,
        }
    }

    // No `table_name`: the derive looks `badges`, Diesel's default, up itself (a missing one is
    // one error naming `table_name`), which must not warn either.
    #[derive(SlottedCounter)]
    #[slotted(crate = slotted, counter = clicks, slots = 2, cache = clicks_count)]
    pub(crate) struct Badge {
        pub(crate) id: i64,
    }
}

/// Counts a click on a banner, whose model is private.
pub fn count_banner_click(id: i64, conn: &mut ::diesel::SqliteConnection) -> slotted::Result<()> {
    private::banner(id).clicks().increment(conn)
}

#[cfg(test)]
mod tests {
    use ::diesel::connection::SimpleConnection;
    use ::diesel::{Connection, SqliteConnection};
    use diesel_migrations::MigrationHarness;
    use slotted::{CounterMaintenance, CounterMigrations};

    use super::*;

    #[test]
    fn every_kind_of_counter_counts() {
        diesel::connect();
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute(
            "CREATE TABLE posts (id INTEGER PRIMARY KEY NOT NULL, likes_count BIGINT NOT NULL)",
        )
        .unwrap();
        conn.batch_execute("INSERT INTO posts (id, likes_count) VALUES (1, 0)")
            .unwrap();
        let migrations = CounterMigrations::of::<Post>()
            .and::<Page>()
            .and::<Topic>()
            .and::<Tag>()
            .and::<Follow>()
            .and::<private::Banner>();
        conn.run_pending_migrations(migrations).unwrap();

        let post = Post { id: 1 };
        post.likes().add(3, &mut conn).unwrap();
        post.views().increment(&mut conn).unwrap();
        post.shares().create_slots(&mut conn).unwrap();
        post.shares().increment(&mut conn).unwrap();
        post.saves().add(2, &mut conn).unwrap();
        Page::hits_of("https://example.com/")
            .increment(&mut conn)
            .unwrap();
        // Every key `likes_of` took as `impl Into<Key>`: a `&str`, a `&String`, a `String`, a
        // narrower integer.
        let url = ::std::string::String::from("https://example.com/");
        Page::hits_of(&url).increment(&mut conn).unwrap();
        Page::hits_of(url).decrement(&mut conn).unwrap();
        Post::likes_of(1_i16).add(0, &mut conn).unwrap();
        count_banner_click(7, &mut conn).unwrap();
        let badge = <private::badges_clicks_slots::table as slotted::CounterTable>::SPEC;
        assert_eq!(
            badge
                .cache
                .map(|c| (c.table, c.key_columns, c.column, c.bits)),
            Some(("badges", &["id"][..], "clicks_count", 64))
        );
        assert_eq!(post.likes().refresh_cache(&mut conn).unwrap().updated, 1);
        posts_likes_slots::table.compact_all(10, &mut conn).unwrap();

        let totals = (
            post.likes().total(&mut conn).unwrap(),
            post.views().total(&mut conn).unwrap(),
            post.shares().total(&mut conn).unwrap(),
            post.saves().total(&mut conn).unwrap(),
            Page::hits_of("https://example.com/")
                .total(&mut conn)
                .unwrap(),
            private::banner(7).clicks().total(&mut conn).unwrap(),
        );
        assert_eq!(totals, (3, 1, 1, 2, 1, 1));

        // Newtype keys.
        let topic = TopicId { raw: RawTopicId(4) };
        Topic::follows_of(topic).add(5, &mut conn).unwrap();
        Topic::mutes_of(topic).increment(&mut conn).unwrap();
        let slug = Slug("rust".into());
        Tag::uses_of(slug.clone()).add(2, &mut conn).unwrap();
        let follows = Topic::follows_totals(&[topic], &mut conn).unwrap();
        assert_eq!(
            (
                follows[&topic],
                Topic::mutes_of(topic).total(&mut conn).unwrap(),
                Tag::uses_of(slug).total(&mut conn).unwrap(),
            ),
            (5, 1, 2)
        );

        // A composite key.
        conn.batch_execute(
            "CREATE TABLE follows (topic INTEGER NOT NULL, person TEXT NOT NULL, \
             visits_count BIGINT NOT NULL, PRIMARY KEY (topic, person)); \
             INSERT INTO follows VALUES (4, 'ada', 0)",
        )
        .unwrap();
        let follow = Follow {
            person: "ada".into(),
            topic,
        };
        follow.visits().add(3, &mut conn).unwrap();
        Follow::visits_of((topic, "grace".into()))
            .increment(&mut conn)
            .unwrap();
        follow.reads().increment(&mut conn).unwrap();
        assert_eq!(follow.visits().refresh_cache(&mut conn).unwrap().updated, 1);
        let key = (topic, ::std::string::String::from("ada"));
        let visits = Follow::visits_totals(::core::slice::from_ref(&key), &mut conn).unwrap();
        assert_eq!(
            (visits[&key], follow.reads().total(&mut conn).unwrap()),
            (3, 1)
        );
    }
}
