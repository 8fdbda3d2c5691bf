-- repair.sql for every counter of the prototype, parents with :lo <= key < :hi (each its own
-- statement and snapshot), then the site. Used as the online backfill's second step.
\ir repair.sql
INSERT INTO posts_score_slots AS t (record_id, slot, count)
SELECT p.id, 0, w.n - coalesce(h.n, 0) FROM posts AS p
 CROSS JOIN LATERAL (SELECT coalesce(sum(score), 0) AS n FROM comments AS c WHERE c.post_id = p.id) AS w
  LEFT JOIN LATERAL (SELECT sum(count) AS n FROM posts_score_slots AS s WHERE s.record_id = p.id) AS h ON true
 WHERE p.id >= :lo AND p.id < :hi AND w.n <> coalesce(h.n, 0) ORDER BY p.id
ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
INSERT INTO users_comments_slots AS t (record_id, slot, count)
SELECT u.id, 0, w.n - coalesce(h.n, 0) FROM users AS u
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM comments AS c WHERE c.author_id = u.id AND NOT c.deleted AND NOT c.removed) AS w
  LEFT JOIN LATERAL (SELECT sum(count) AS n FROM users_comments_slots AS s WHERE s.record_id = u.id) AS h ON true
 WHERE u.id >= :lo AND u.id < :hi AND w.n <> coalesce(h.n, 0) ORDER BY u.id
ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
INSERT INTO communities_comments_slots AS t (record_id, slot, count)
SELECT m.id, 0, w.n - coalesce(h.n, 0) FROM communities AS m
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM comments AS c JOIN posts AS p ON p.id = c.post_id
                      WHERE p.community_id = m.id AND NOT c.deleted AND NOT c.removed) AS w
  LEFT JOIN LATERAL (SELECT sum(count) AS n FROM communities_comments_slots AS s WHERE s.record_id = m.id) AS h ON true
 WHERE m.id >= :lo AND m.id < :hi AND w.n <> coalesce(h.n, 0) ORDER BY m.id
ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
