-- counter posts_comments: key R.post_id, filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_posts_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND (NOT OLD.deleted AND NOT OLD.removed) THEN
        ok := OLD.post_id;
        IF ok IS NOT NULL THEN od := -coalesce(1, 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND (NOT NEW.deleted AND NOT NEW.removed) THEN
        nk := NEW.post_id;
        IF nk IS NOT NULL THEN nd := coalesce(1, 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
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
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO posts_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO posts_comments_slots AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO posts_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_posts_comments_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN (NOT NEW.deleted AND NOT NEW.removed) EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');
CREATE TRIGGER slotted_follow_posts_comments_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN (NOT OLD.deleted AND NOT OLD.removed) EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');
CREATE TRIGGER slotted_follow_posts_comments_update AFTER UPDATE OF post_id, deleted, removed ON comments FOR EACH ROW
    EXECUTE FUNCTION slotted_follow_posts_comments(:'slots');

-- counter posts_score: key R.post_id, filter true, value R.score
CREATE FUNCTION slotted_follow_posts_score() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND (true) THEN
        ok := OLD.post_id;
        IF ok IS NOT NULL THEN od := -coalesce(OLD.score, 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND (true) THEN
        nk := NEW.post_id;
        IF nk IS NOT NULL THEN nd := coalesce(NEW.score, 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
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
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO posts_score_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO posts_score_slots AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO posts_score_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_posts_score_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN (true) EXECUTE FUNCTION slotted_follow_posts_score(:'slots');
CREATE TRIGGER slotted_follow_posts_score_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN (true) EXECUTE FUNCTION slotted_follow_posts_score(:'slots');
CREATE TRIGGER slotted_follow_posts_score_update AFTER UPDATE OF post_id, score ON comments FOR EACH ROW
    EXECUTE FUNCTION slotted_follow_posts_score(:'slots');

-- counter users_comments: key R.author_id, filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_users_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND (NOT OLD.deleted AND NOT OLD.removed) THEN
        ok := OLD.author_id;
        IF ok IS NOT NULL THEN od := -coalesce(1, 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND (NOT NEW.deleted AND NOT NEW.removed) THEN
        nk := NEW.author_id;
        IF nk IS NOT NULL THEN nd := coalesce(1, 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
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
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO users_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO users_comments_slots AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO users_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_users_comments_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN (NOT NEW.deleted AND NOT NEW.removed) EXECUTE FUNCTION slotted_follow_users_comments(:'slots');
CREATE TRIGGER slotted_follow_users_comments_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN (NOT OLD.deleted AND NOT OLD.removed) EXECUTE FUNCTION slotted_follow_users_comments(:'slots');
CREATE TRIGGER slotted_follow_users_comments_update AFTER UPDATE OF author_id, deleted, removed ON comments FOR EACH ROW
    EXECUTE FUNCTION slotted_follow_users_comments(:'slots');

-- counter communities_comments: key (SELECT p.community_id FROM posts p WHERE p.id = R.post_id), filter NOT R.deleted AND NOT R.removed, value 1
CREATE FUNCTION slotted_follow_communities_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND (NOT OLD.deleted AND NOT OLD.removed) THEN
        ok := (SELECT p.community_id FROM posts p WHERE p.id = OLD.post_id);
        IF ok IS NOT NULL THEN od := -coalesce(1, 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND (NOT NEW.deleted AND NOT NEW.removed) THEN
        nk := (SELECT p.community_id FROM posts p WHERE p.id = NEW.post_id);
        IF nk IS NOT NULL THEN nd := coalesce(1, 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
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
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO communities_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO communities_comments_slots AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO communities_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_communities_comments_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN (NOT NEW.deleted AND NOT NEW.removed) EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');
CREATE TRIGGER slotted_follow_communities_comments_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN (NOT OLD.deleted AND NOT OLD.removed) EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');
CREATE TRIGGER slotted_follow_communities_comments_update AFTER UPDATE OF post_id, deleted, removed ON comments FOR EACH ROW
    EXECUTE FUNCTION slotted_follow_communities_comments(:'slots');

-- counter sites_comments: key 0, filter R.local, value 1
CREATE FUNCTION slotted_follow_sites_comments() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND (OLD.local) THEN
        ok := 0;
        IF ok IS NOT NULL THEN od := -coalesce(1, 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND (NEW.local) THEN
        nk := 0;
        IF nk IS NOT NULL THEN nd := coalesce(1, 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
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
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO sites_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO sites_comments_slots AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO sites_comments_slots AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER slotted_follow_sites_comments_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN (NEW.local) EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');
CREATE TRIGGER slotted_follow_sites_comments_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN (OLD.local) EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');
CREATE TRIGGER slotted_follow_sites_comments_update AFTER UPDATE OF local ON comments FOR EACH ROW
    EXECUTE FUNCTION slotted_follow_sites_comments(:'slots');

