-- The site-wide counter (one record, 0): the same, over the whole child table. At 10^6 rows
-- one count(*) of local comments; no lock on comments.
INSERT INTO sites_comments_slots AS t (record_id, slot, count)
SELECT 0, 0, w.n - coalesce(h.n, 0)
  FROM (SELECT count(*) AS n FROM comments WHERE local) AS w,
       (SELECT sum(count) AS n FROM sites_comments_slots WHERE record_id = 0) AS h
 WHERE w.n <> coalesce(h.n, 0)
ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
