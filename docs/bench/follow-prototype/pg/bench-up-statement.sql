-- counter posts_comments: key R.post_id, filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_posts_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
BEGIN
    w := NULLIF(current_setting('slotted.writer', true), '')::integer;
    IF w IS NULL THEN
        SELECT min(objid::bigint) INTO w FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2
           AND pid = pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
        IF w IS NULL THEN
            SELECT i INTO w FROM generate_series(0, 1023) AS i
             WHERE pg_try_advisory_lock(1936486260, i) LIMIT 1;
        END IF;
        w := coalesce(w, 1024 + pg_backend_pid() % 1024);
        PERFORM set_config('slotted.writer', w::text, false);
    END IF;
    s := (w % TG_ARGV[0]::integer)::smallint;
    -- The statement's deltas per parent, upserted in key order in one statement: two
    -- statements that share a slot lock its rows in the same order (no deadlock).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO posts_comments_slots AS t (record_id, slot, count)
        SELECT k, s, d FROM (SELECT n.post_id AS k, sum(coalesce(1, 0)) AS d
                             FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO posts_comments_slots AS t (record_id, slot, count)
        SELECT k, s, -d FROM (SELECT o.post_id AS k, sum(coalesce(1, 0)) AS d
                              FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSE
        INSERT INTO posts_comments_slots AS t (record_id, slot, count)
        SELECT k, s, sum(d) FROM (
            SELECT n.post_id AS k, coalesce(1, 0) AS d FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed
            UNION ALL
            SELECT o.post_id, -coalesce(1, 0) FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed) AS x
         WHERE k IS NOT NULL GROUP BY k HAVING sum(d) <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_posts_comments_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');
CREATE TRIGGER slotted_follow_posts_comments_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS slotted_old
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');
CREATE TRIGGER slotted_follow_posts_comments_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');

-- counter users_comments: key R.author_id, filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_users_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
BEGIN
    w := NULLIF(current_setting('slotted.writer', true), '')::integer;
    IF w IS NULL THEN
        SELECT min(objid::bigint) INTO w FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2
           AND pid = pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
        IF w IS NULL THEN
            SELECT i INTO w FROM generate_series(0, 1023) AS i
             WHERE pg_try_advisory_lock(1936486260, i) LIMIT 1;
        END IF;
        w := coalesce(w, 1024 + pg_backend_pid() % 1024);
        PERFORM set_config('slotted.writer', w::text, false);
    END IF;
    s := (w % TG_ARGV[0]::integer)::smallint;
    -- The statement's deltas per parent, upserted in key order in one statement: two
    -- statements that share a slot lock its rows in the same order (no deadlock).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO users_comments_slots AS t (record_id, slot, count)
        SELECT k, s, d FROM (SELECT n.author_id AS k, sum(coalesce(1, 0)) AS d
                             FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO users_comments_slots AS t (record_id, slot, count)
        SELECT k, s, -d FROM (SELECT o.author_id AS k, sum(coalesce(1, 0)) AS d
                              FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSE
        INSERT INTO users_comments_slots AS t (record_id, slot, count)
        SELECT k, s, sum(d) FROM (
            SELECT n.author_id AS k, coalesce(1, 0) AS d FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed
            UNION ALL
            SELECT o.author_id, -coalesce(1, 0) FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed) AS x
         WHERE k IS NOT NULL GROUP BY k HAVING sum(d) <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_users_comments_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_users_comments(:'slots');
CREATE TRIGGER slotted_follow_users_comments_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS slotted_old
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_users_comments(:'slots');
CREATE TRIGGER slotted_follow_users_comments_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_users_comments(:'slots');

-- counter communities_comments: key (SELECT p.community_id FROM posts p WHERE p.id = R.post_id), filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_communities_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
BEGIN
    w := NULLIF(current_setting('slotted.writer', true), '')::integer;
    IF w IS NULL THEN
        SELECT min(objid::bigint) INTO w FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2
           AND pid = pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
        IF w IS NULL THEN
            SELECT i INTO w FROM generate_series(0, 1023) AS i
             WHERE pg_try_advisory_lock(1936486260, i) LIMIT 1;
        END IF;
        w := coalesce(w, 1024 + pg_backend_pid() % 1024);
        PERFORM set_config('slotted.writer', w::text, false);
    END IF;
    s := (w % TG_ARGV[0]::integer)::smallint;
    -- The statement's deltas per parent, upserted in key order in one statement: two
    -- statements that share a slot lock its rows in the same order (no deadlock).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO communities_comments_slots AS t (record_id, slot, count)
        SELECT k, s, d FROM (SELECT (SELECT p.community_id FROM posts p WHERE p.id = n.post_id) AS k, sum(coalesce(1, 0)) AS d
                             FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO communities_comments_slots AS t (record_id, slot, count)
        SELECT k, s, -d FROM (SELECT (SELECT p.community_id FROM posts p WHERE p.id = o.post_id) AS k, sum(coalesce(1, 0)) AS d
                              FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSE
        INSERT INTO communities_comments_slots AS t (record_id, slot, count)
        SELECT k, s, sum(d) FROM (
            SELECT (SELECT p.community_id FROM posts p WHERE p.id = n.post_id) AS k, coalesce(1, 0) AS d FROM slotted_new AS n WHERE NOT n.deleted AND NOT n.removed
            UNION ALL
            SELECT (SELECT p.community_id FROM posts p WHERE p.id = o.post_id), -coalesce(1, 0) FROM slotted_old AS o WHERE NOT o.deleted AND NOT o.removed) AS x
         WHERE k IS NOT NULL GROUP BY k HAVING sum(d) <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_communities_comments_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');
CREATE TRIGGER slotted_follow_communities_comments_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS slotted_old
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');
CREATE TRIGGER slotted_follow_communities_comments_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');

-- counter sites_comments: key 0, filter R.local, value 1
CREATE FUNCTION slotted_follow_sites_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
BEGIN
    w := NULLIF(current_setting('slotted.writer', true), '')::integer;
    IF w IS NULL THEN
        SELECT min(objid::bigint) INTO w FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 1936486260 AND objsubid = 2
           AND pid = pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
        IF w IS NULL THEN
            SELECT i INTO w FROM generate_series(0, 1023) AS i
             WHERE pg_try_advisory_lock(1936486260, i) LIMIT 1;
        END IF;
        w := coalesce(w, 1024 + pg_backend_pid() % 1024);
        PERFORM set_config('slotted.writer', w::text, false);
    END IF;
    s := (w % TG_ARGV[0]::integer)::smallint;
    -- The statement's deltas per parent, upserted in key order in one statement: two
    -- statements that share a slot lock its rows in the same order (no deadlock).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO sites_comments_slots AS t (record_id, slot, count)
        SELECT k, s, d FROM (SELECT 0 AS k, sum(coalesce(1, 0)) AS d
                             FROM slotted_new AS n WHERE n.local GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO sites_comments_slots AS t (record_id, slot, count)
        SELECT k, s, -d FROM (SELECT 0 AS k, sum(coalesce(1, 0)) AS d
                              FROM slotted_old AS o WHERE o.local GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSE
        INSERT INTO sites_comments_slots AS t (record_id, slot, count)
        SELECT k, s, sum(d) FROM (
            SELECT 0 AS k, coalesce(1, 0) AS d FROM slotted_new AS n WHERE n.local
            UNION ALL
            SELECT 0, -coalesce(1, 0) FROM slotted_old AS o WHERE o.local) AS x
         WHERE k IS NOT NULL GROUP BY k HAVING sum(d) <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_sites_comments_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');
CREATE TRIGGER slotted_follow_sites_comments_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS slotted_old
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');
CREATE TRIGGER slotted_follow_sites_comments_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');

