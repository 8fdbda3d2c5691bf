#!/usr/bin/env bash
# PostgreSQL part of run.sh. Needs PG_BASE (postgres://user@host:port), ROUNDS, SECS.
set -euo pipefail
cd "$(dirname "$0")"
export PGOPTIONS='-c client_min_messages=warning'
P() { psql "$PG_BASE/$1" -X -q -v ON_ERROR_STOP=1 "${@:2}"; }
BENCH="pgbench -n -M prepared"
DB=slotted_follow_proto_pg
out=results/pg.txt; mkdir -p results; : > "$out"
log() { echo "$*" | tee -a "$out"; }
fresh() { P postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"; P $DB -f pg/schema.sql; }
clear_triggers() { P $DB -f pg/down.sql -f pg/bench-down.sql -f pg/hotrow-down.sql; }
reset_rows() {
  P $DB -c "TRUNCATE comments, posts_comments_slots, posts_score_slots, users_comments_slots, communities_comments_slots, sites_comments_slots RESTART IDENTITY" \
        -c "UPDATE post_aggregates SET comments = 0, score = 0" -c "UPDATE community_aggregates SET comments = 0" \
        -c "UPDATE person_aggregates SET comment_count = 0" -c "UPDATE site_aggregates SET comments = 0" -c "VACUUM ANALYZE"
}
install() { # variant
  clear_triggers
  case $1 in
    none) ;;
    hot) P $DB -f pg/hotrow-up.sql ;;
    row*) P $DB -v slots=${1#row} -f pg/bench-up-row.sql ;;
    stmt*) P $DB -v slots=${1#stmt} -f pg/bench-up-statement.sql ;;
  esac
}
log "# PostgreSQL follow-counter prototype, $(date -u +%FT%TZ), $(P postgres -Atc 'select version()')"
fresh

log "## 1. unit cases (pg/unit.sql) then pg/check.sql, per shape"
for shape in row statement; do
  reset_rows; clear_triggers; P $DB -v slots=16 -f pg/up-$shape.sql; P $DB -f pg/unit.sql
  log "shape $shape:"; P $DB -f pg/check.sql | tee -a "$out"
done
clear_triggers
log "down leaves: $(P $DB -Atc "select count(*) from pg_trigger where not tgisinternal") triggers, $(P $DB -Atc "select count(*) from pg_proc where proname like 'slotted%'") functions"

log "## 6. throughput: 32 clients, 1 comment on 1 of 5 hot posts + 2 ms, counted for author/post/community/site; ${ROUNDS} rounds x ${SECS} s, rotated"
VARIANTS=(none hot row16 row32 stmt32 row1024)
for r in $(seq 1 "$ROUNDS"); do
  n=${#VARIANTS[@]}
  for i in $(seq 0 $((n - 1))); do
    v=${VARIANTS[$(( (i + r - 1) % n ))]}
    install "$v"; reset_rows
    tps=$($BENCH -c 32 -j 4 -T "$SECS" -f pg/insert.pgbench "$PG_BASE/$DB" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    fails=$(P $DB -Atc "select 0")
    spread=""
    [[ $v == row* || $v == stmt* ]] && spread=" site_slots_written=$(P $DB -Atc "select count(*) from sites_comments_slots")"
    ok=$(P $DB -Atc "select case when '$v' = 'none' then 'n/a' when '$v' = 'hot' then ((select comments from site_aggregates) = (select count(*) from comments))::text else ((select sum(count) from sites_comments_slots) = (select count(*) from comments))::text end")
    log "round $r $v tps=$tps exact=$ok$spread"
  done
done

log "## 6b. bulk INSERT ... SELECT of N comments on 5 posts (one session), ms; the hot-row trigger is quadratic here (each of its UPDATEs walks the chain of versions of the same row its own transaction made), so it runs at 10,000 and 30,000 rows and once at 100,000 under a 300 s statement_timeout"
bulk() { P $DB -c '\timing on' -c "SET statement_timeout = '300s'" -c "INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + g % 5, 1 + g % 1000, true, 1 FROM generate_series(1, $1) g" 2>&1 | sed -n -e 's/^Time: \([0-9.]*\) ms.*/\1/p' -e 's/.*\(statement timeout\).*/timeout/p' | tail -1; }
for r in 1 2 3; do
  for v in none row32 stmt32; do
    install "$v"; reset_rows; log "round $r $v rows=100000 bulk_ms=$(bulk 100000)"
  done
done
for n in 10000 30000; do
  for v in none hot row32 stmt32; do install "$v"; reset_rows; log "$v rows=$n bulk_ms=$(bulk $n)"; done
done
install hot; reset_rows; log "hot rows=100000 bulk_ms=$(bulk 100000)"

log "## 1b. single-row insert cost, one session, no sleep (10 s, pgbench -c 1)"
for v in none row32 stmt32; do
  install "$v"; reset_rows
  tps=$($BENCH -c 1 -T 10 -f <(grep -v sleep pg/insert.pgbench) "$PG_BASE/$DB" 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  log "$v single-session tps=$tps"
done

log "## 3. concurrency: 16 clients, pg/mix.pgbench 20 s, all 5 counters, then check"
for shape in none row statement; do
  clear_triggers; reset_rows
  [[ $shape != none ]] && P $DB -v slots=32 -f pg/up-$shape.sql
  P $DB -c "INSERT INTO comments (post_id, author_id, local, score) SELECT 1 + g % 6, 1 + g % 50, g % 2 = 0, 1 FROM generate_series(1, 3000) g"
  res=$($BENCH -c 16 -j 4 -T 20 --failures-detailed -f pg/mix.pgbench "$PG_BASE/$DB" 2>&1 | grep -E "^tps|failed|deadlock|serialization|aborted" | tr '\n' ' ')
  log "mix $shape: $res"
  [[ $shape != none ]] && P $DB -f pg/check.sql | tee -a "$out"
done

log "## 3b. deadlock probes, posts.comments only: slots=1 forces every session onto one slot row per post (more writers than slots); 8 clients, 10 s"
for slots in 1 32; do
  for shape in row statement; do
    for probe in multi-insert multi-insert-2stmt; do
      clear_triggers; reset_rows
      SLOTTED_COUNTERS=posts_comments pg/gen.sh $shape | P $DB -v slots=$slots
      res=$($BENCH -c 8 -j 4 -T 10 --failures-detailed -f pg/$probe.pgbench "$PG_BASE/$DB" 2>&1 | grep -E "^tps|failed|deadlock" | tr '\n' ' ')
      log "slots=$slots $shape $probe: $res"
      log "  posts.comments exact: $(P $DB -Atc "select (select count(*) from comments) = (select sum(count) from posts_comments_slots)")"
    done
  done
done

log "## 4/5. backfill beside writers at 10^6 comments, then verify (16 clients of pg/mix.pgbench throughout)"
for how in online locked; do
  clear_triggers; reset_rows
  P $DB -c "INSERT INTO comments (post_id, author_id, local, score, deleted) SELECT 1 + g % 1000, 1 + g % 1000, g % 2 = 0, g % 5 - 2, g % 17 = 0 FROM generate_series(1, 1000000) g" -c "VACUUM ANALYZE comments"
  $BENCH -c 16 -j 4 -T 25 --failures-detailed -l --log-prefix=results/pg-backfill-$how -f pg/mix.pgbench "$PG_BASE/$DB" > results/pg-backfill-$how.pgbench 2>&1 &
  bench=$!
  sleep 5
  t0=$(date +%s.%N)
  if [[ $how == online ]]; then
    P $DB -v slots=32 -f pg/backfill-online.sql
    t1=$(date +%s.%N)
    for lo in $(seq 0 100 1000); do P $DB -v lo=$lo -v hi=$((lo + 100)) -f pg/repair-all.sql; done
    P $DB -f pg/repair-site.sql
  else
    P $DB -v slots=32 -f pg/backfill-locked.sql
    t1=$(date +%s.%N)
  fi
  t2=$(date +%s.%N)
  wait $bench
  maxlat=$(cat results/pg-backfill-$how.* 2>/dev/null | awk '$3 > m {m = $3} END {printf "%.0f", m / 1000}')
  log "backfill $how: trigger transaction $(echo "($t1 - $t0) * 1000" | bc | cut -d. -f1) ms, whole backfill $(echo "($t2 - $t0) * 1000" | bc | cut -d. -f1) ms, writers' longest transaction ${maxlat} ms; $(grep -E '^tps|failed' results/pg-backfill-$how.pgbench | tr '\n' ' ')"
  P $DB -f pg/check.sql | tee -a "$out"
  log "verify of posts.comments (all parents, one statement per 100 keys), rows reported:"
  t0=$(date +%s.%N); n=0
  for lo in $(seq 0 100 1000); do n=$((n + $(P $DB -At -v lo=$lo -v hi=$((lo + 100)) -f pg/verify.sql | wc -l))); done
  log "  $n drifting parents, $(echo "($(date +%s.%N) - $t0) * 1000" | bc | cut -d. -f1) ms for 1000 parents / 10^6 rows"
  rm -f results/pg-backfill-$how.[0-9]*
done
log "drift then repair: disable the triggers for a bulk load, verify reports it, repair fixes it"
P $DB -c "ALTER TABLE comments DISABLE TRIGGER USER" -c "INSERT INTO comments (post_id, author_id) SELECT 1 + g % 7, 1 FROM generate_series(1, 500) g" -c "ALTER TABLE comments ENABLE TRIGGER USER"
log "  verify reports $(P $DB -At -v lo=0 -v hi=1000 -f pg/verify.sql | wc -l) drifting posts"
P $DB -v lo=0 -v hi=1001 -f pg/repair-all.sql; P $DB -f pg/repair-site.sql
P $DB -f pg/check.sql | tee -a "$out"

P postgres -c "DROP DATABASE $DB"
