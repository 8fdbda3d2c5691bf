-- The axum_likes example's own table. Portable SQL: the same text runs on PostgreSQL,
-- MySQL/MariaDB and SQLite. The likes live in posts_likes_slots, which slotted's
-- CounterMigrations create.
CREATE TABLE posts (
    id INTEGER PRIMARY KEY NOT NULL,
    title VARCHAR(200) NOT NULL
);
