use super::*;
use crate::table::TEST_SPEC;

const COMMENTS: FollowSpec = FollowSpec {
    table: "comments",
    key_columns: &["post_id"],
    record: None,
    sum: None,
    filter: &[("deleted", false), ("removed", false)],
    through: None,
};

const SCORE: FollowSpec = FollowSpec {
    table: "post_votes",
    key_columns: &["post_id"],
    record: None,
    sum: Some("score"),
    filter: &[],
    through: None,
};

fn spec(table: &'static str, follow: FollowSpec) -> CounterSpec {
    CounterSpec {
        table,
        follow: Some(follow),
        ..TEST_SPEC
    }
}

#[test]
fn the_triggers_count_only_rows_that_pass_the_filter() {
    let comments = [spec("posts_comments_slots", COMMENTS)];
    let up = follow_up_sql("comments", &comments, Dialect::Postgres);
    assert!(
        up.contains(r#"slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE"#),
        "{up}"
    );
    assert!(
        up.contains(
            r#"CREATE TRIGGER "slotted_follow_comments_update" AFTER UPDATE ON "comments""#
        ),
        "{up}"
    );
    let up = follow_up_sql("comments", &comments, Dialect::Sqlite);
    assert!(
        up.contains(r#"AFTER UPDATE OF "post_id", "deleted", "removed" ON "comments""#),
        "{up}"
    );
    let votes = [spec("posts_score_slots", SCORE)];
    let up = follow_up_sql("post_votes", &votes, Dialect::Mysql);
    assert!(
        up.contains("SET slotted_new = COALESCE(NEW.`score`, 0)"),
        "{up}"
    );
    assert!(
        up.starts_with("-- slotted: Post.likes follow post_votes"),
        "{up}"
    );
    // A table no counter follows: nothing.
    assert_eq!(follow_up_sql("post_votes", &comments, Dialect::Mysql), "");
}

#[test]
fn one_set_of_triggers_keeps_every_counter_of_a_child_table_in_table_order() {
    let site = FollowSpec {
        table: "comments",
        key_columns: &[],
        record: Some(1),
        sum: None,
        filter: &[("local", true)],
        through: None,
    };
    let specs = [
        spec("sites_comments_slots", site),
        spec("posts_comments_slots", COMMENTS),
        spec("posts_score_slots", SCORE),
    ];
    for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
        let up = follow_up_sql("comments", &specs, dialect);
        let creates = up.matches("CREATE TRIGGER").count();
        assert_eq!(creates, 3, "{dialect:?}: {up}");
        let posts = up.find("INSERT INTO ").map(|_| ()).and(up.find(&format!(
            "INSERT INTO {}",
            quote(dialect, "posts_comments_slots")
        )));
        let sites = up.find(&format!(
            "INSERT INTO {}",
            quote(dialect, "sites_comments_slots")
        ));
        assert!(posts.unwrap() < sites.unwrap(), "{dialect:?}: {up}");
        // The counter of another child table is not in them.
        assert!(!up.contains("posts_score_slots"), "{dialect:?}: {up}");
        // The writer index is taken once per trigger.
        let takes = match dialect {
            Dialect::Postgres => up.matches("pg_try_advisory_lock").count(),
            Dialect::Mysql => up.matches("WHILE @slotted_writer IS NULL").count(),
            Dialect::Sqlite => 0,
        };
        assert_eq!(
            takes,
            match dialect {
                Dialect::Postgres => 1,
                Dialect::Mysql => 3,
                Dialect::Sqlite => 0,
            },
            "{dialect:?}: {up}"
        );
    }
}

#[test]
fn a_count_through_a_table_between_puts_triggers_on_it_too() {
    let through = FollowSpec {
        through: Some(crate::follow::Through {
            table: "posts",
            key: "id",
            column: "community_id",
        }),
        ..COMMENTS
    };
    let specs = [spec("communities_comments_slots", through)];
    for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
        let up = follow_up_sql("comments", &specs, dialect);
        assert_eq!(up.matches("CREATE TRIGGER").count(), 6, "{dialect:?}: {up}");
        let on_posts = format!("ON {} FOR EACH ROW", quote(dialect, "posts"));
        assert_eq!(up.matches(&on_posts).count(), 3, "{dialect:?}: {up}");
        // The moves and deletes of a post run before the row changes, so that a
        // cascade's changes of its comments come after.
        assert!(up.contains("BEFORE DELETE"), "{dialect:?}: {up}");
        let down = down("comments", &specs, dialect);
        assert_eq!(
            down.matches("DROP TRIGGER").count(),
            6,
            "{dialect:?}: {down}"
        );
    }
    let up = follow_up_sql("comments", &specs, Dialect::Postgres);
    assert!(
        up.contains(r#"LOCK TABLE "comments", "posts" IN SHARE ROW EXCLUSIVE MODE"#),
        "{up}"
    );
    assert!(
        up.contains(r#"ORDER BY "id" FOR KEY SHARE"#),
        "the posts of a statement's comments are locked in key order: {up}"
    );
    // Two functions, one chosen when the migration runs: without the insert's lock where a
    // foreign key's check takes it (2 locks: the update's, the delete's), with it elsewhere (3).
    assert!(
        up.contains("DO $slotted_fk$") && up.contains("NOT k.condeferrable"),
        "{up}"
    );
    assert_eq!(up.matches("FOR KEY SHARE").count(), 5, "{up}");
    assert!(
        up.contains(r#"PERFORM 1 FROM "posts" WHERE "id" = OLD."id" FOR UPDATE"#),
        "a move waits for the comments being added to its post: {up}"
    );
    let up = follow_up_sql("comments", &specs, Dialect::Mysql);
    assert!(up.contains("LOCK IN SHARE MODE"), "{up}");
}

#[test]
fn an_online_migration_makes_the_triggers_and_counts_nothing() {
    let specs = [spec("posts_comments_slots", COMMENTS)];
    for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
        let locked = follow_up_sql("comments", &specs, dialect);
        let online = follow_up_sql_with("comments", &specs, dialect, Backfill::Online);
        let backfill = format!("SELECT \"comments\".\"post_id\", {}, SUM(", specs[0].slots);
        let backfill = match dialect {
            Dialect::Mysql => backfill.replace('"', "`"),
            _ => backfill,
        };
        assert!(locked.contains(&backfill), "{dialect:?}: {locked}");
        assert!(!online.contains(&backfill), "{dialect:?}: {online}");
        assert!(online.contains("repair_follow_all"), "{online}");
        // The same triggers, and the same DDL around them.
        let triggers = |sql: &str| sql.matches("CREATE TRIGGER").count();
        assert_eq!(triggers(&online), triggers(&locked), "{dialect:?}");
        assert_eq!(triggers(&online), 3, "{dialect:?}");
    }
}

#[test]
fn the_removal_drops_only_the_triggers() {
    let down = follow_down_sql("comments", Dialect::Postgres);
    assert_eq!(
        down,
        "DROP TRIGGER IF EXISTS \"slotted_follow_comments_insert\" ON \"comments\";\n\
         DROP TRIGGER IF EXISTS \"slotted_follow_comments_update\" ON \"comments\";\n\
         DROP TRIGGER IF EXISTS \"slotted_follow_comments_delete\" ON \"comments\";\n\
         DROP FUNCTION IF EXISTS \"slotted_follow_comments\"();\n"
    );
    let down = follow_down_sql("comments", Dialect::Sqlite);
    assert_eq!(down.lines().count(), 3);
    assert!(down
        .lines()
        .all(|l| l.starts_with("DROP TRIGGER IF EXISTS")));
}

#[test]
fn long_names_are_shortened_within_every_backends_limit() {
    let long = "a_child_table_whose_name_is_long_enough_to_pass_the_identifier_limit";
    let name = trigger_name(long, "update");
    assert!(name.len() <= 63, "{name}");
    assert_ne!(name, trigger_name(long, "insert"));
}

/// `SLOTTED_PRINT_FOLLOW=1 cargo test -p slotted-core --lib follow -- --nocapture`: the DDL.
#[test]
fn print() {
    if std::env::var("SLOTTED_PRINT_FOLLOW").is_ok() {
        let specs = [spec("posts_comments_slots", COMMENTS)];
        for dialect in [Dialect::Postgres, Dialect::Mysql, Dialect::Sqlite] {
            println!("{}", follow_up_sql("comments", &specs, dialect));
        }
    }
}
