-- Baseline (b): Lemmy's shape, a row trigger that updates one aggregate row per parent.
-- Only what the benchmark needs (insert and delete of comments counted for author, post,
-- community and site).
CREATE FUNCTION hotrow_comment_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE d integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; r comments;
BEGIN
    IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
    UPDATE person_aggregates SET comment_count = comment_count + d WHERE person_id = r.author_id;
    UPDATE post_aggregates SET comments = comments + d WHERE post_id = r.post_id;
    UPDATE community_aggregates SET comments = comments + d
     WHERE community_id = (SELECT community_id FROM posts WHERE id = r.post_id);
    UPDATE site_aggregates SET comments = comments + d WHERE r.local;
    RETURN NULL;
END $$;
CREATE TRIGGER hotrow_comment_count AFTER INSERT OR DELETE ON comments
    FOR EACH ROW EXECUTE FUNCTION hotrow_comment_count();
