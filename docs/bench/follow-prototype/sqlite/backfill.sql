-- SQLite backfill: one writer at a time, so the triggers and the initial counts go in one
-- write transaction (BEGIN IMMEDIATE ... COMMIT): writers wait (busy_timeout) for its length.
-- Written as repairs (add the difference), so it is also the verify-and-repair job.
INSERT INTO posts_comments_slots (record_id, slot, count)
SELECT k, 0, d FROM (SELECT k, sum(d) AS d FROM (
    SELECT post_id AS k, 1 AS d FROM comments WHERE post_id IS NOT NULL AND NOT deleted AND NOT removed
    UNION ALL SELECT record_id, -count FROM posts_comments_slots) GROUP BY k) WHERE d <> 0
ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;
INSERT INTO posts_score_slots (record_id, slot, count)
SELECT k, 0, d FROM (SELECT k, sum(d) AS d FROM (
    SELECT post_id AS k, score AS d FROM comments WHERE post_id IS NOT NULL
    UNION ALL SELECT record_id, -count FROM posts_score_slots) GROUP BY k) WHERE d <> 0
ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;
INSERT INTO users_comments_slots (record_id, slot, count)
SELECT k, 0, d FROM (SELECT k, sum(d) AS d FROM (
    SELECT author_id AS k, 1 AS d FROM comments WHERE author_id IS NOT NULL AND NOT deleted AND NOT removed
    UNION ALL SELECT record_id, -count FROM users_comments_slots) GROUP BY k) WHERE d <> 0
ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;
INSERT INTO communities_comments_slots (record_id, slot, count)
SELECT k, 0, d FROM (SELECT k, sum(d) AS d FROM (
    SELECT p.community_id AS k, 1 AS d FROM comments c JOIN posts p ON p.id = c.post_id
     WHERE p.community_id IS NOT NULL AND NOT c.deleted AND NOT c.removed
    UNION ALL SELECT record_id, -count FROM communities_comments_slots) GROUP BY k) WHERE d <> 0
ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;
INSERT INTO sites_comments_slots (record_id, slot, count)
SELECT 0, 0, d FROM (SELECT (SELECT count(*) FROM comments WHERE local)
                          - coalesce((SELECT sum(count) FROM sites_comments_slots), 0) AS d) WHERE d <> 0
ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;
