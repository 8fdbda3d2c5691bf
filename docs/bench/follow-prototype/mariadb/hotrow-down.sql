DROP TRIGGER IF EXISTS hotrow_comment_insert;
DROP TRIGGER IF EXISTS hotrow_comment_delete;
