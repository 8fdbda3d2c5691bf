-- Verify one batch (@lo <= key < @hi) of posts.comments: one SELECT, a consistent
-- (non-locking) read, so one read view for the child rows and the slots; writers are not
-- blocked and a difference is drift, not a writer in flight (a trigger writes its slot in the
-- child write's own transaction).
SELECT p.id AS record_id, w.n AS want, COALESCE(h.n, 0) AS have, w.n - COALESCE(h.n, 0) AS drift
  FROM posts AS p
  JOIN (SELECT post_id, COUNT(*) AS n FROM comments WHERE post_id >= @lo AND post_id < @hi
          AND NOT deleted AND NOT removed GROUP BY post_id) AS w ON w.post_id = p.id
  LEFT JOIN (SELECT record_id, SUM(count) AS n FROM posts_comments_slots
              WHERE record_id >= @lo AND record_id < @hi GROUP BY record_id) AS h ON h.record_id = p.id
 WHERE p.id >= @lo AND p.id < @hi AND w.n <> COALESCE(h.n, 0)
UNION ALL -- parents with slots but no counted rows
SELECT h.record_id, 0, h.n, -h.n
  FROM (SELECT record_id, SUM(count) AS n FROM posts_comments_slots
         WHERE record_id >= @lo AND record_id < @hi GROUP BY record_id) AS h
 WHERE h.n <> 0 AND NOT EXISTS (SELECT 1 FROM comments c WHERE c.post_id = h.record_id AND NOT c.deleted AND NOT c.removed)
 ORDER BY 1;
