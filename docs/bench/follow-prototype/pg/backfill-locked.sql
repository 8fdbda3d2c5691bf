-- The blocking alternative: triggers and initial counts in one transaction under the lock
-- CREATE TRIGGER takes anyway (SHARE ROW EXCLUSIVE: writers of comments wait until COMMIT).
BEGIN;
LOCK TABLE comments IN SHARE ROW EXCLUSIVE MODE;
\ir up-row.sql
INSERT INTO posts_comments_slots (record_id, slot, count)
SELECT post_id, 0, count(*) FROM comments WHERE post_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY post_id ORDER BY post_id;
INSERT INTO posts_score_slots (record_id, slot, count)
SELECT post_id, 0, sum(score) FROM comments WHERE post_id IS NOT NULL GROUP BY post_id ORDER BY post_id;
INSERT INTO users_comments_slots (record_id, slot, count)
SELECT author_id, 0, count(*) FROM comments WHERE author_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY author_id ORDER BY author_id;
INSERT INTO communities_comments_slots (record_id, slot, count)
SELECT p.community_id, 0, count(*) FROM comments c JOIN posts p ON p.id = c.post_id
 WHERE p.community_id IS NOT NULL AND NOT c.deleted AND NOT c.removed GROUP BY p.community_id ORDER BY 1;
INSERT INTO sites_comments_slots (record_id, slot, count) SELECT 0, 0, count(*) FROM comments WHERE local;
COMMIT;
