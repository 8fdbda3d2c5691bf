-- Repair one batch (:lo <= key < :hi) of posts.comments: add each parent's drift to slot 0.
-- One statement: the drift is computed at the statement's snapshot and added with
-- count = count + drift, which commutes with every trigger write committed after it, so the
-- repair is exact beside writers and locks only the slot-0 rows it changes, in key order.
-- Also the backfill (see backfill-online.sql): after the triggers exist, every parent's drift
-- is its whole count of the rows written before.
INSERT INTO posts_comments_slots AS t (record_id, slot, count)
SELECT p.id, 0, w.n - coalesce(h.n, 0)
  FROM posts AS p
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM comments AS c
                      WHERE c.post_id = p.id AND NOT c.deleted AND NOT c.removed) AS w
  LEFT JOIN LATERAL (SELECT sum(count) AS n FROM posts_comments_slots AS s
                      WHERE s.record_id = p.id) AS h ON true
 WHERE p.id >= :lo AND p.id < :hi AND w.n <> coalesce(h.n, 0)
 ORDER BY p.id
ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
