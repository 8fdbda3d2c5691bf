-- Backfill on a table that already has rows, without blocking writers beyond the
-- CREATE TRIGGER itself:
-- 1. create the triggers and commit (CREATE TRIGGER takes SHARE ROW EXCLUSIVE on comments: it
--    waits for the writers in flight and holds off new ones until this short transaction
--    commits; every transaction that commits afterwards and writes comments runs the triggers);
-- 2. run repair.sql over every batch of parents (and repair-site.sql): each batch's drift is, at
--    its snapshot, (rows counted) - (trigger deltas committed), i.e. exactly the rows written
--    before step 1 and still there; adding it is exact whatever writers do meanwhile.
-- psql: \set slots 32 before; pg.sh runs the batches.
\ir up-row.sql
