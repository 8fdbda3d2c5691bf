-- Every counter against the child rows, in one statement (one read view).
SELECT c, COUNT(*) AS parents, SUM(want) AS want, SUM(have) AS have, SUM(want <> have) AS wrong FROM (
  SELECT c, k, SUM(w) AS want, SUM(h) AS have FROM (
    SELECT 'posts_comments' AS c, post_id AS k, 1 AS w, 0 AS h FROM comments WHERE post_id IS NOT NULL AND NOT deleted AND NOT removed
    UNION ALL SELECT 'posts_score', post_id, score, 0 FROM comments WHERE post_id IS NOT NULL
    UNION ALL SELECT 'users_comments', author_id, 1, 0 FROM comments WHERE author_id IS NOT NULL AND NOT deleted AND NOT removed
    UNION ALL SELECT 'communities_comments', p.community_id, 1, 0 FROM comments c JOIN posts p ON p.id = c.post_id WHERE NOT c.deleted AND NOT c.removed
    UNION ALL SELECT 'sites_comments', 0, 1, 0 FROM comments WHERE local
    UNION ALL SELECT 'posts_comments', record_id, 0, count FROM posts_comments_slots
    UNION ALL SELECT 'posts_score', record_id, 0, count FROM posts_score_slots
    UNION ALL SELECT 'users_comments', record_id, 0, count FROM users_comments_slots
    UNION ALL SELECT 'communities_comments', record_id, 0, count FROM communities_comments_slots
    UNION ALL SELECT 'sites_comments', record_id, 0, count FROM sites_comments_slots
  ) AS x GROUP BY c, k
) AS y GROUP BY c ORDER BY c;
