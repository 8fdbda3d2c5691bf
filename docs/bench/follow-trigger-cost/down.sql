DROP TRIGGER IF EXISTS private_comment_count ON comments; DROP FUNCTION IF EXISTS private_comment_count();
DROP TRIGGER IF EXISTS slotted_follow_comments_insert ON comments; DROP TRIGGER IF EXISTS slotted_follow_comments_update ON comments; DROP TRIGGER IF EXISTS slotted_follow_comments_delete ON comments; DROP FUNCTION IF EXISTS slotted_follow_comments();
