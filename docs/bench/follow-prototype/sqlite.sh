#!/usr/bin/env bash
# SQLite: unit cases, down, bulk insert of 100,000 rows with and without the triggers, and
# the online backfill (triggers, then a repair over the rows written before).
set -euo pipefail
cd "$(dirname "$0")"
out=results/sqlite.txt; mkdir -p results; : > "$out"
log() { echo "$*" | tee -a "$out"; }
db=$(mktemp -d)/slotted_follow_proto.db
S() { sqlite3 -bail "$db" "$@"; }
log "# SQLite follow-counter prototype, $(date -u +%FT%TZ), $(sqlite3 --version | cut -d' ' -f1)"
S < sqlite/schema.sql; sqlite/gen.sh up | S; S < sqlite/unit.sql
log "## unit cases then check"; S -header -column < sqlite/check.sql | tee -a "$out"
sqlite/gen.sh down | S; log "down leaves $(S "select count(*) from sqlite_master where type = 'trigger'") triggers"
BULK="WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 100000) INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + g % 5, 1 + g % 1000, 1, 1 FROM n;"
for r in 1 2 3; do
  for v in none follow; do
    S "DELETE FROM comments; DELETE FROM posts_comments_slots; DELETE FROM posts_score_slots; DELETE FROM users_comments_slots; DELETE FROM communities_comments_slots; DELETE FROM sites_comments_slots;"
    sqlite/gen.sh down | S; [[ $v == follow ]] && sqlite/gen.sh up | S
    t0=$(date +%s%N); S "$BULK"; log "round $r $v bulk 100000: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
done
log "## backfill: triggers over existing rows, then one repair statement per counter in one write transaction"
sqlite/gen.sh down | S; S "DELETE FROM posts_comments_slots; DELETE FROM posts_score_slots; DELETE FROM users_comments_slots; DELETE FROM communities_comments_slots; DELETE FROM sites_comments_slots;"
{ echo "BEGIN IMMEDIATE;"; sqlite/gen.sh up; cat sqlite/backfill.sql; echo "COMMIT;"; } | S
S "$BULK DELETE FROM comments WHERE id % 3 = 0;"
S -header -column < sqlite/check.sql | tee -a "$out"
rm -f "$db"
