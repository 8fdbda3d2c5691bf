//! Models whose counters adopt existing counter columns (`adopt = …`): an `INTEGER` column moved
//! into the slots, a `BIGINT` column kept as the roll-up's cache once absorbed, and a plain
//! cache column that holds counts of its own (the trap a roll-up must not fall into).
use slotted_core::SlottedCounter;

diesel::table! {
    clips (id) {
        id -> Integer,
        likes_count -> Integer,
        views_count -> BigInt,
        saves_count -> BigInt,
        shares_count -> Integer,
        likes_total -> BigInt,
        plays_total -> BigInt,
    }
}

/// A clip with counter columns as an application keeps them before slotted: `likes_count`
/// adopted (its roll-up into a column of its own, `likes_total`), `views_count` adopted and kept
/// as the cache once absorbed, `saves_count` a plain cache, `shares_count` adopted in the
/// shared table.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = clips)]
#[slotted(counter = likes, slots = 4, adopt = likes_count, cache = likes_total)]
#[slotted(counter = views, slots = 4, adopt = views_count, cache = views_count)]
#[slotted(counter = saves, slots = 4, cache = saves_count)]
#[slotted(counter = shares, slots = 2, storage = shared, adopt = shares_count)]
#[slotted(counter = plays, slots = 2, storage = shared, cache = plays_total)]
pub struct Clip {
    pub id: i32,
}

diesel::table! {
    post_aggregates (post_id) {
        post_id -> Integer,
        likes -> BigInt,
    }
}

/// An aggregates row kept by a database trigger (`AFTER INSERT ON post_likes`), as a federated
/// forum keeps its `post_aggregates`: the counter adopts the trigger's column.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = post_aggregates, primary_key(post_id))]
#[slotted(counter = likes, slots = 8, adopt = likes, cache = likes)]
pub struct PostAggregate {
    pub post_id: i32,
}

/// The `clips` table with these rows `(id, likes_count, views_count, saves_count)`, and the
/// counters' migrations.
pub fn create_clips<C: crate::TestConnection>(conn: &mut C, rows: &[(i32, i32, i64, i64)]) {
    conn.batch_execute(
        "CREATE TABLE clips (id INTEGER PRIMARY KEY, likes_count INTEGER NOT NULL, \
         views_count BIGINT NOT NULL, saves_count BIGINT NOT NULL, \
         shares_count INTEGER NOT NULL DEFAULT 0, likes_total BIGINT NOT NULL DEFAULT 0, \
         plays_total BIGINT NOT NULL DEFAULT 0)",
    )
    .expect("create clips");
    if !rows.is_empty() {
        let values: Vec<String> = rows
            .iter()
            .map(|(id, likes, views, saves)| format!("({id}, {likes}, {views}, {saves})"))
            .collect();
        conn.batch_execute(&format!(
            "INSERT INTO clips (id, likes_count, views_count, saves_count) VALUES {}",
            values.join(", ")
        ))
        .expect("insert clips");
    }
    conn.run_pending_migrations(slotted_core::CounterMigrations::of::<Clip>())
        .expect("the clips' counter migrations");
}

/// An old binary's write: `UPDATE clips SET <column> = <column> + delta WHERE id = ?`.
pub fn old_style_add(column: &str, id: i32, delta: i64) -> String {
    format!("UPDATE clips SET {column} = {column} + {delta} WHERE id = {id}")
}

diesel::table! {
    clip_days (clip_id, day) {
        clip_id -> Integer,
        day -> Integer,
        plays -> Integer,
    }
}

/// A composite key whose column is adopted: a clip's plays per day.
#[derive(Debug, Clone, SlottedCounter)]
#[diesel(table_name = clip_days, primary_key(clip_id, day))]
#[slotted(counter = plays, slots = 2, adopt = plays)]
pub struct ClipDay {
    pub clip_id: i32,
    pub day: i32,
}
