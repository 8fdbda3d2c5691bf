-- Baseline (b): Lemmy's shape, aggregate rows updated by row triggers.
DELIMITER //
CREATE TRIGGER hotrow_comment_insert AFTER INSERT ON comments FOR EACH ROW
BEGIN
    UPDATE person_aggregates SET comment_count = comment_count + 1 WHERE person_id = NEW.author_id;
    UPDATE post_aggregates SET comments = comments + 1 WHERE post_id = NEW.post_id;
    UPDATE community_aggregates SET comments = comments + 1 WHERE community_id = (SELECT community_id FROM posts WHERE id = NEW.post_id);
    UPDATE site_aggregates SET comments = comments + 1 WHERE NEW.local;
END//
CREATE TRIGGER hotrow_comment_delete AFTER DELETE ON comments FOR EACH ROW
BEGIN
    UPDATE person_aggregates SET comment_count = comment_count - 1 WHERE person_id = OLD.author_id;
    UPDATE post_aggregates SET comments = comments - 1 WHERE post_id = OLD.post_id;
    UPDATE community_aggregates SET comments = comments - 1 WHERE community_id = (SELECT community_id FROM posts WHERE id = OLD.post_id);
    UPDATE site_aggregates SET comments = comments - 1 WHERE OLD.local;
END//
DELIMITER ;
