-- Every counter against the child rows; prints each mismatching parent and a summary row.
-- Run as one statement: one snapshot for the child rows and the slots.
WITH want AS (
    SELECT 'posts_comments' AS c, post_id::bigint AS k, count(*)::numeric AS n FROM comments
     WHERE post_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY post_id
    UNION ALL SELECT 'posts_score', post_id, sum(score) FROM comments WHERE post_id IS NOT NULL GROUP BY post_id
    UNION ALL SELECT 'users_comments', author_id, count(*) FROM comments
     WHERE author_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY author_id
    UNION ALL SELECT 'communities_comments', p.community_id, count(*) FROM comments c JOIN posts p ON p.id = c.post_id
     WHERE p.community_id IS NOT NULL AND NOT deleted AND NOT removed GROUP BY p.community_id
    UNION ALL SELECT 'sites_comments', 0, count(*) FROM comments WHERE local
), have AS (
    SELECT 'posts_comments' AS c, record_id::bigint AS k, sum(count) AS n FROM posts_comments_slots GROUP BY record_id
    UNION ALL SELECT 'posts_score', record_id, sum(count) FROM posts_score_slots GROUP BY record_id
    UNION ALL SELECT 'users_comments', record_id, sum(count) FROM users_comments_slots GROUP BY record_id
    UNION ALL SELECT 'communities_comments', record_id, sum(count) FROM communities_comments_slots GROUP BY record_id
    UNION ALL SELECT 'sites_comments', record_id, sum(count) FROM sites_comments_slots GROUP BY record_id
), diff AS (
    SELECT coalesce(w.c, h.c) AS c, coalesce(w.k, h.k) AS k, coalesce(w.n, 0) AS want, coalesce(h.n, 0) AS have
      FROM want w FULL JOIN have h ON h.c = w.c AND h.k = w.k
)
SELECT c, count(*) AS parents, sum(want) AS want, sum(have) AS have,
       count(*) FILTER (WHERE want <> have) AS wrong
  FROM diff GROUP BY c ORDER BY c;
