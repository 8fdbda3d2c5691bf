CREATE FUNCTION private_comment_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE d integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; r comments;
        w integer := pg_backend_pid();
BEGIN
    IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
    IF NOT r.deleted AND NOT r.removed THEN
        INSERT INTO private_person_comments VALUES (r.author_id, w, d) ON CONFLICT (record_id, writer)
            DO UPDATE SET count = private_person_comments.count + excluded.count;
        INSERT INTO private_post_comments VALUES (r.post_id, w, d) ON CONFLICT (record_id, writer)
            DO UPDATE SET count = private_post_comments.count + excluded.count;
        INSERT INTO private_community_comments
            SELECT community_id, w, d FROM posts WHERE id = r.post_id ON CONFLICT (record_id, writer)
            DO UPDATE SET count = private_community_comments.count + excluded.count;
    END IF;
    IF r.local THEN
        INSERT INTO private_site_comments VALUES (1, w, d) ON CONFLICT (record_id, writer)
            DO UPDATE SET count = private_site_comments.count + excluded.count;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER private_comment_count AFTER INSERT OR DELETE ON comments FOR EACH ROW EXECUTE FUNCTION private_comment_count();
