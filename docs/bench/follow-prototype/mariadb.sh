#!/usr/bin/env bash
# MariaDB part of run.sh. Needs MY_HOST, MY_PORT, MY_USER, ROUNDS, SECS.
set -euo pipefail
cd "$(dirname "$0")"
M() { mariadb -h"$MY_HOST" -P"$MY_PORT" -u"$MY_USER" "$@"; }
CLIENT=${CLIENT:-/tmp/slotted_follow_client}
gcc -O2 -o "$CLIENT" mariadb/client.c $(mariadb_config --cflags --libs) -lpthread
C() { "$CLIENT" "$MY_HOST" "$MY_PORT" "$MY_USER" "$DB" "$@"; }
DB=slotted_follow_proto_my
out=results/mariadb.txt; mkdir -p results; : > "$out"
log() { echo "$*" | tee -a "$out"; }
gen() { SLOTS=$1 SLOTTED_COUNTERS=${2:-} mariadb/gen.sh up; }
BENCH_COUNTERS="posts_comments users_comments communities_comments sites_comments"
clear_triggers() { { mariadb/gen.sh down; cat mariadb/hotrow-down.sql; } | M $DB; }
reset_rows() {
  M $DB -e "SET FOREIGN_KEY_CHECKS = 0; TRUNCATE comments; SET FOREIGN_KEY_CHECKS = 1;
    TRUNCATE posts_comments_slots; TRUNCATE posts_score_slots; TRUNCATE users_comments_slots;
    TRUNCATE communities_comments_slots; TRUNCATE sites_comments_slots;
    UPDATE post_aggregates SET comments = 0; UPDATE community_aggregates SET comments = 0;
    UPDATE person_aggregates SET comment_count = 0; UPDATE site_aggregates SET comments = 0;"
}
install() {
  clear_triggers
  case $1 in
    none) ;;
    hot) M $DB < mariadb/hotrow-up.sql ;;
    row*) gen "${1#row}" "$BENCH_COUNTERS" | M $DB ;;
  esac
}
check() { M -t $DB < mariadb/check.sql | tee -a "$out"; }
log "# MariaDB follow-counter prototype, $(date -u +%FT%TZ), $(M -N -e 'select version()')"
M -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
M $DB < mariadb/schema.sql

log "## 1. unit cases then check"
gen 16 | M $DB; M $DB < mariadb/unit.sql; check
clear_triggers
log "down leaves $(M -N -e "select count(*) from information_schema.triggers where trigger_schema = '$DB'") triggers"

log "## 6. throughput: 32 clients (C, libmariadb, threads), 1 comment on 1 of 5 hot posts + 2 ms, counted for author/post/community/site; ${ROUNDS} rounds x ${SECS} s, rotated"
VARIANTS=(none hot row16 row32 row1024)
for r in $(seq 1 "$ROUNDS"); do
  n=${#VARIANTS[@]}
  for i in $(seq 0 $((n - 1))); do
    v=${VARIANTS[$(( (i + r - 1) % n ))]}
    install "$v"; reset_rows
    res=$(C 32 "$SECS" bench)
    case $v in
      none) ok=n/a ;;
      hot) ok=$(M -N $DB -e "select (select comments from site_aggregates) = (select count(*) from comments)") ;;
      *) ok=$(M -N $DB -e "select (select sum(count) from sites_comments_slots) = (select count(*) from comments)")" site_slots_written=$(M -N $DB -e "select count(*) from sites_comments_slots")" ;;
    esac
    log "round $r $v $res exact=$ok"
  done
done

log "## 6b. bulk INSERT ... SELECT of 100,000 comments (one session)"
for r in 1 2 3; do
  for v in none hot row32; do
    install "$v"; reset_rows
    log "round $r $v $(C 1 0 bulk | head -1)"
  done
done

log "## 3. concurrency: 16 clients, mix of every write kind, 20 s, all 5 counters (32 slots), then check"
for v in none row; do
  clear_triggers; reset_rows
  [[ $v == row ]] && gen 32 | M $DB
  M $DB -e "INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + seq % 6, 1 + seq % 50, seq % 2 = 0, 1 FROM seq_1_to_3000"
  log "mix $v: $(C 16 20 mix)"
  [[ $v == row ]] && check
done

log "## 3b. deadlock probes (errors 1213 = deadlock, 1205 = lock wait timeout); slots=1: every session on one slot row"
for slots in none 1 32; do
  for probe in probe probe2; do
    clear_triggers; reset_rows
    [[ $slots != none ]] && gen $slots | M $DB
    log "slots=$slots $probe: $(C 8 10 $probe)"
    [[ $slots != none ]] && check > /dev/null
  done
done

log "## 4/5. online backfill beside writers at 10^6 comments, then verify"
clear_triggers; reset_rows
M $DB -e "INSERT INTO comments (post_id, author_id, local, score, deleted) SELECT 1 + seq % 1000, 1 + seq % 1000, seq % 2 = 0, CAST(seq % 5 AS SIGNED) - 2, seq % 17 = 0 FROM seq_1_to_1000000; ANALYZE TABLE comments" > /dev/null
( C 16 25 mix > results/my-backfill-writers.txt ) &
bench=$!
sleep 5
t0=$(date +%s.%N)
gen 32 | M $DB
t1=$(date +%s.%N)
for lo in $(seq 0 100 1000); do (echo "SET @lo = $lo, @hi = $((lo + 100));"; cat mariadb/repair.sql) | M $DB; done
t2=$(date +%s.%N)
wait $bench
log "backfill (posts.comments): triggers $(echo "($t1 - $t0) * 1000" | bc | cut -d. -f1) ms, repair batches $(echo "($t2 - $t1) * 1000" | bc | cut -d. -f1) ms; writers: $(cat results/my-backfill-writers.txt)"
check
t0=$(date +%s.%N); n=0
for lo in $(seq 0 100 1000); do n=$((n + $( (echo "SET @lo = $lo, @hi = $((lo + 100));"; cat mariadb/verify.sql) | M -N $DB | wc -l))); done
log "verify posts.comments: $n drifting parents, $(echo "($(date +%s.%N) - $t0) * 1000" | bc | cut -d. -f1) ms for 1000 parents / 10^6 rows"
M -e "DROP DATABASE $DB"
