CREATE FUNCTION "slotted_follow_comments"() RETURNS trigger LANGUAGE plpgsql AS $slotted$
DECLARE
    slotted_writer_text TEXT := current_setting('slotted.writer', true);
    slotted_writer INTEGER;
BEGIN
    IF slotted_writer_text IS NULL OR slotted_writer_text = '' THEN
        slotted_writer_text := (SELECT COALESCE(NULLIF(current_setting('slotted.writer', true), ''), set_config('slotted.writer', CAST(COALESCE((SELECT MIN(CAST(objid AS BIGINT)) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2 AND pid = pg_backend_pid() AND database = (SELECT oid FROM pg_database WHERE datname = current_database())), (SELECT slotted_w FROM generate_series(0, 1023) AS slotted_w WHERE pg_try_advisory_lock(1936486260, slotted_w) LIMIT 1), 1024 + pg_backend_pid() % 1024) AS TEXT), false)));
    END IF;
    slotted_writer := CAST(slotted_writer_text AS INTEGER);
    IF TG_OP = 'INSERT' THEN
        INSERT INTO "communities_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT "posts"."community_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r JOIN "posts" ON "posts"."id" = slotted_r."post_id" AND "posts"."community_id" IS NOT NULL WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "communities_comments_slots"."count" + excluded."count";
        INSERT INTO "posts_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."post_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "posts_comments_slots"."count" + excluded."count";
        INSERT INTO "sites_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT 1 AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."local" IS TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "sites_comments_slots"."count" + excluded."count";
        INSERT INTO "users_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."author_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."author_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "users_comments_slots"."count" + excluded."count";
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO "communities_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT "posts"."community_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r JOIN "posts" ON "posts"."id" = slotted_r."post_id" AND "posts"."community_id" IS NOT NULL WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "communities_comments_slots"."count" + excluded."count";
        INSERT INTO "posts_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."post_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "posts_comments_slots"."count" + excluded."count";
        INSERT INTO "sites_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT 1 AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."local" IS TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "sites_comments_slots"."count" + excluded."count";
        INSERT INTO "users_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."author_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."author_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "users_comments_slots"."count" + excluded."count";
    ELSE
        INSERT INTO "communities_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT "posts"."community_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r JOIN "posts" ON "posts"."id" = slotted_r."post_id" AND "posts"."community_id" IS NOT NULL WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE UNION ALL SELECT "posts"."community_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r JOIN "posts" ON "posts"."id" = slotted_r."post_id" AND "posts"."community_id" IS NOT NULL WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "communities_comments_slots"."count" + excluded."count";
        INSERT INTO "posts_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."post_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE UNION ALL SELECT slotted_r."post_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."post_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "posts_comments_slots"."count" + excluded."count";
        INSERT INTO "sites_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT 1 AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."local" IS TRUE UNION ALL SELECT 1 AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."local" IS TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "sites_comments_slots"."count" + excluded."count";
        INSERT INTO "users_comments_slots" ("record_id", "slot", "count")
        SELECT slotted_k1, CAST(slotted_writer % 32 AS SMALLINT), slotted_d FROM (SELECT slotted_r."author_id" AS slotted_k1, 1 AS slotted_d FROM slotted_new AS slotted_r WHERE slotted_r."author_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE UNION ALL SELECT slotted_r."author_id" AS slotted_k1, -1 AS slotted_d FROM slotted_old AS slotted_r WHERE slotted_r."author_id" IS NOT NULL AND slotted_r."deleted" IS NOT TRUE AND slotted_r."removed" IS NOT TRUE) AS slotted_changes
       
        ON CONFLICT ("record_id", "slot") DO UPDATE SET "count" = "users_comments_slots"."count" + excluded."count";
    END IF;
    RETURN NULL;
END
$slotted$;
CREATE TRIGGER "slotted_follow_comments_insert" AFTER INSERT ON "comments"
    REFERENCING NEW TABLE AS slotted_new FOR EACH STATEMENT EXECUTE FUNCTION "slotted_follow_comments"();
CREATE TRIGGER "slotted_follow_comments_update" AFTER UPDATE ON "comments"
    REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new FOR EACH STATEMENT EXECUTE FUNCTION "slotted_follow_comments"();
CREATE TRIGGER "slotted_follow_comments_delete" AFTER DELETE ON "comments"
    REFERENCING OLD TABLE AS slotted_old FOR EACH STATEMENT EXECUTE FUNCTION "slotted_follow_comments"();
