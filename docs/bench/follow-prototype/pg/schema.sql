-- A cut of Lemmy's schema: the child table `comments` and its parents.
CREATE TABLE sites (id INTEGER PRIMARY KEY);
CREATE TABLE communities (id INTEGER PRIMARY KEY);
CREATE TABLE users (id INTEGER PRIMARY KEY);
CREATE TABLE posts (id INTEGER PRIMARY KEY, community_id INTEGER REFERENCES communities);
CREATE TABLE comments (
    id BIGSERIAL PRIMARY KEY,
    post_id INTEGER REFERENCES posts,
    author_id INTEGER REFERENCES users,
    deleted BOOLEAN NOT NULL DEFAULT false,
    removed BOOLEAN NOT NULL DEFAULT false,
    local BOOLEAN NOT NULL DEFAULT true,
    score INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX comments_post_id ON comments (post_id);
CREATE INDEX comments_author_id ON comments (author_id);

-- The counter tables, as DESIGN.md's Storage.
CREATE TABLE posts_comments_slots (record_id INTEGER NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot));
CREATE TABLE posts_score_slots (record_id INTEGER NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot));
CREATE TABLE users_comments_slots (record_id INTEGER NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot));
CREATE TABLE communities_comments_slots (record_id INTEGER NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot));
CREATE TABLE sites_comments_slots (record_id INTEGER NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, PRIMARY KEY (record_id, slot));

-- The hot-row baseline (Lemmy's aggregates).
CREATE TABLE post_aggregates (post_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0, score BIGINT NOT NULL DEFAULT 0);
CREATE TABLE community_aggregates (community_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);
CREATE TABLE person_aggregates (person_id INTEGER PRIMARY KEY, comment_count BIGINT NOT NULL DEFAULT 0);
CREATE TABLE site_aggregates (site_id INTEGER PRIMARY KEY, comments BIGINT NOT NULL DEFAULT 0);

INSERT INTO sites VALUES (1);
INSERT INTO communities SELECT g FROM generate_series(1, 10) g;
INSERT INTO users SELECT g FROM generate_series(1, 1000) g;
INSERT INTO posts SELECT g, 1 + g % 10 FROM generate_series(1, 1000) g;
INSERT INTO post_aggregates (post_id) SELECT id FROM posts;
INSERT INTO community_aggregates (community_id) SELECT id FROM communities;
INSERT INTO person_aggregates (person_id) SELECT id FROM users;
INSERT INTO site_aggregates (site_id) VALUES (1);
