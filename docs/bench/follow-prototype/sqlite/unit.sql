-- Sequential cases: every kind of change, NULL keys, multi-row statements.
INSERT INTO comments (post_id, author_id, local, score) VALUES (1, 1, true, 1), (1, 2, false, 5), (2, 1, true, -1);
INSERT INTO comments (post_id, author_id, score) VALUES (NULL, NULL, 3);            -- NULL parents: not counted
INSERT INTO comments (post_id, author_id, deleted, score) VALUES (3, 3, true, 2);   -- filtered out
UPDATE comments SET post_id = 4 WHERE post_id = 1 AND author_id = 1;                 -- move to another post (other community)
UPDATE comments SET deleted = true WHERE post_id = 2;                                -- filter flips off
UPDATE comments SET deleted = false WHERE post_id = 3;                               -- filter flips on
UPDATE comments SET removed = true, post_id = 5 WHERE author_id = 2;                 -- move and flip at once
UPDATE comments SET score = score + 10;                                              -- summed value changes, multi-row
UPDATE comments SET post_id = 6 WHERE post_id IS NULL;                               -- NULL -> parent
UPDATE comments SET post_id = NULL WHERE post_id = 4;                                -- parent -> NULL
UPDATE comments SET local = NOT local;                                               -- site filter flips both ways
UPDATE comments SET author_id = 7 WHERE author_id IS NULL;
UPDATE comments SET post_id = CASE post_id WHEN 5 THEN 6 WHEN 6 THEN 5 END WHERE post_id IN (5, 6); -- swap, one statement
WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 10000) INSERT INTO comments (post_id, author_id, local, score, deleted)
SELECT 1 + g % 50, 1 + g % 300, g % 3 = 0, g % 7 - 3, g % 11 = 0 FROM n;      -- multi-row insert
DELETE FROM comments WHERE id % 5 = 0;                                               -- multi-row delete
UPDATE comments SET post_id = post_id + 1 WHERE id % 7 = 0;                          -- multi-row moves
UPDATE comments SET deleted = NOT deleted WHERE id % 13 = 0;                         -- multi-row flips
BEGIN; INSERT INTO comments (post_id, author_id) VALUES (9, 9); ROLLBACK;            -- rolled back: not counted
