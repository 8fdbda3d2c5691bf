-- Verify one batch of parents (:lo <= key < :hi) of posts.comments: one statement, so one
-- snapshot for the child rows and the slots. A trigger writes its slot in the child write's
-- own transaction, so at any snapshot the two agree; a difference is drift (a trigger that
-- was disabled or dropped, a TRUNCATE, a session_replication_role = replica load...), never
-- a writer in flight. Takes no lock beyond AccessShare: writers are not blocked.
SELECT p.id AS record_id, w.n AS want, coalesce(h.n, 0) AS have, w.n - coalesce(h.n, 0) AS drift
  FROM posts AS p
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM comments AS c
                      WHERE c.post_id = p.id AND NOT c.deleted AND NOT c.removed) AS w
  LEFT JOIN LATERAL (SELECT sum(count) AS n FROM posts_comments_slots AS s
                      WHERE s.record_id = p.id) AS h ON true
 WHERE p.id >= :lo AND p.id < :hi AND w.n <> coalesce(h.n, 0)
 ORDER BY p.id;
-- Slot rows of records that are not parents (a parent deleted under ON DELETE SET NULL /
-- without a cascade to the slots) are found apart:
--   SELECT record_id FROM posts_comments_slots s WHERE NOT EXISTS (SELECT 1 FROM posts p WHERE p.id = s.record_id)
