//! Exactness: every mode's counts checked against `COUNT(*)` over `comments` after each run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use slotted_examples::BoxError;

use super::{Community, Mode, Post, Server, Site, User, COMMUNITIES, POSTS, USERS};

/// What each counter must hold: `COUNT(*)`s over `comments`, zeros left out.
struct Expected {
    rows: i64,
    posts: BTreeMap<i64, i64>,
    authors: BTreeMap<i64, i64>,
    communities: BTreeMap<i64, i64>,
    site: i64,
}

fn expected<C: Server>(conn: &mut C) -> Result<Expected, BoxError> {
    let int = C::INT;
    let counted = "NOT deleted AND NOT removed";
    Ok(Expected {
        rows: conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments"
        ))?,
        posts: conn.pairs(&format!(
            "SELECT CAST(post_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
             WHERE {counted} GROUP BY post_id"
        ))?,
        authors: conn.pairs(&format!(
            "SELECT CAST(author_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n FROM comments \
             WHERE {counted} GROUP BY author_id"
        ))?,
        communities: conn.pairs(&format!(
            "SELECT CAST(p.community_id AS {int}) AS k, CAST(COUNT(*) AS {int}) AS n \
             FROM comments c JOIN posts p ON p.id = c.post_id \
             WHERE NOT c.deleted AND NOT c.removed GROUP BY p.community_id"
        ))?,
        site: conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM comments WHERE local"
        ))?,
    })
}

fn nonzero<K: Into<i64>>(map: impl IntoIterator<Item = (K, i64)>) -> BTreeMap<i64, i64> {
    map.into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(k, n)| (k.into(), n))
        .collect()
}

/// Checks `mode`'s counts against `comments` and its `COUNT(*)` against `committed` (when
/// known). Returns a line for the report; an error when anything is off.
pub(super) fn check<C: Server>(
    conn: &mut C,
    mode: Mode,
    committed: Option<(u64, u64)>,
) -> Result<String, BoxError> {
    let want = expected(conn)?;
    if let Some((low, high)) = committed {
        let rows = want.rows as u64;
        if rows < low || rows > high {
            return Err(format!(
                "{}, {}: {} comments in the table, but the writers committed {low}{}",
                C::NAME,
                mode.name(),
                rows,
                if high > low {
                    format!(" to {high}")
                } else {
                    String::new()
                }
            )
            .into());
        }
    }
    let int = C::INT;
    let (posts, authors, communities, site) = match mode {
        Mode::None | Mode::PgbenchNone | Mode::RawNone => return Ok(format!("{} rows", want.rows)),
        Mode::Follow => {
            let post_ids: Vec<i32> = (1..=POSTS).collect();
            let user_ids: Vec<i32> = (1..=USERS).collect();
            let community_ids: Vec<i32> = (1..=COMMUNITIES).collect();
            (
                nonzero(Post::comments_totals(&post_ids, conn)?),
                nonzero(User::comments_totals(&user_ids, conn)?),
                nonzero(Community::comments_totals(&community_ids, conn)?),
                Site::comments_of(1).total(conn)?,
            )
        }
        Mode::HotRow => (
            conn.pairs(&format!(
                "SELECT CAST(post_id AS {int}) AS k, CAST(comments AS {int}) AS n \
                 FROM post_aggregates WHERE comments <> 0"
            ))?,
            conn.pairs(&format!(
                "SELECT CAST(person_id AS {int}) AS k, CAST(comment_count AS {int}) AS n \
                 FROM person_aggregates WHERE comment_count <> 0"
            ))?,
            conn.pairs(&format!(
                "SELECT CAST(community_id AS {int}) AS k, CAST(comments AS {int}) AS n \
                 FROM community_aggregates WHERE comments <> 0"
            ))?,
            conn.number(&format!(
                "SELECT CAST(comments AS {int}) AS n FROM site_aggregates WHERE site_id = 1"
            ))?,
        ),
        Mode::Private => {
            let sums = |table: &str| {
                format!(
                    "SELECT CAST(record_id AS {int}) AS k, CAST(SUM(count) AS {int}) AS n \
                     FROM {table} GROUP BY record_id HAVING SUM(count) <> 0"
                )
            };
            (
                conn.pairs(&sums("private_post_comments"))?,
                conn.pairs(&sums("private_person_comments"))?,
                conn.pairs(&sums("private_community_comments"))?,
                conn.number(&format!(
                    "SELECT CAST(COALESCE(SUM(count), 0) AS {int}) AS n FROM private_site_comments"
                ))?,
            )
        }
    };
    if posts != want.posts
        || authors != want.authors
        || communities != want.communities
        || site != want.site
    {
        return Err(format!(
            "{}, {}: counts not exact: posts {posts:?} (want {:?}), communities {communities:?} \
             (want {:?}), site {site} (want {}), authors {} (want {})",
            C::NAME,
            mode.name(),
            want.posts,
            want.communities,
            want.site,
            authors.values().sum::<i64>(),
            want.authors.values().sum::<i64>(),
        )
        .into());
    }
    let mut line = format!("{} rows, exact", want.rows);
    if mode == Mode::Follow {
        let slots = conn.number(&format!(
            "SELECT CAST(COUNT(*) AS {int}) AS n FROM sites_comments_slots"
        ))?;
        write!(line, "; the site's slot rows written: {slots} of 32")?;
    }
    Ok(line)
}
