-- Repair one batch (@lo <= key < @hi) of posts.comments: the drift read in one consistent
-- read (READ COMMITTED: CREATE ... SELECT then reads without locking the child rows), then
-- added to slot 0 with count = count + drift, which commutes with every trigger write after
-- the read. Also the backfill's second step (after the triggers exist).
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;
DROP TEMPORARY TABLE IF EXISTS slotted_drift;
CREATE TEMPORARY TABLE slotted_drift ENGINE=MEMORY AS
SELECT k, SUM(d) AS d FROM (
    SELECT post_id AS k, 1 AS d FROM comments WHERE post_id >= @lo AND post_id < @hi AND NOT deleted AND NOT removed
    UNION ALL
    SELECT record_id, -count FROM posts_comments_slots WHERE record_id >= @lo AND record_id < @hi
) AS x GROUP BY k HAVING SUM(d) <> 0;
INSERT INTO posts_comments_slots (record_id, slot, count)
SELECT k, 0, d FROM slotted_drift ORDER BY k
ON DUPLICATE KEY UPDATE count = posts_comments_slots.count + slotted_drift.d;
DROP TEMPORARY TABLE slotted_drift;
