DROP TRIGGER IF EXISTS hotrow_comment_count ON comments;
DROP FUNCTION IF EXISTS hotrow_comment_count();
