CREATE TABLE sites (id INT PRIMARY KEY) ENGINE=InnoDB;
CREATE TABLE communities (id INT PRIMARY KEY) ENGINE=InnoDB;
CREATE TABLE users (id INT PRIMARY KEY) ENGINE=InnoDB;
CREATE TABLE posts (id INT PRIMARY KEY, community_id INT, FOREIGN KEY (community_id) REFERENCES communities (id)) ENGINE=InnoDB;
CREATE TABLE comments (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    post_id INT, author_id INT,
    deleted BOOLEAN NOT NULL DEFAULT FALSE, removed BOOLEAN NOT NULL DEFAULT FALSE,
    local BOOLEAN NOT NULL DEFAULT TRUE, score INT NOT NULL DEFAULT 0,
    FOREIGN KEY (post_id) REFERENCES posts (id), FOREIGN KEY (author_id) REFERENCES users (id)
) ENGINE=InnoDB;
CREATE TABLE posts_comments_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;
CREATE TABLE posts_score_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;
CREATE TABLE users_comments_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;
CREATE TABLE communities_comments_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;
CREATE TABLE sites_comments_slots (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;
CREATE TABLE post_aggregates (post_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
CREATE TABLE community_aggregates (community_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
CREATE TABLE person_aggregates (person_id INT PRIMARY KEY, comment_count BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
CREATE TABLE site_aggregates (site_id INT PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB;
INSERT INTO sites VALUES (1);
INSERT INTO communities SELECT seq FROM seq_1_to_10;
INSERT INTO users SELECT seq FROM seq_1_to_1000;
INSERT INTO posts SELECT seq, 1 + seq % 10 FROM seq_1_to_1000;
INSERT INTO post_aggregates (post_id) SELECT id FROM posts;
INSERT INTO community_aggregates (community_id) SELECT id FROM communities;
INSERT INTO person_aggregates (person_id) SELECT id FROM users;
INSERT INTO site_aggregates (site_id) VALUES (1);
