SET synchronous_commit = off;
\timing on
DO $$ BEGIN FOR i IN 1..20000 LOOP INSERT INTO comments (post_id, author_id) VALUES (1 + i % 5, 1 + i % 100); COMMIT; END LOOP; END $$;
