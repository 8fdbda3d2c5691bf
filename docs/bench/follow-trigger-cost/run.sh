#!/bin/sh
# What a comment costs with each PostgreSQL trigger variant (see README.md). Usage:
#   ./run.sh postgres://postgres@127.0.0.1:5432
# Creates and drops its own database, slotted_follow_trigger_cost.
set -eu
base=${1:?a PostgreSQL URL without a database}
cd "$(dirname "$0")"
db=slotted_follow_trigger_cost
psql "$base/postgres" -q -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
url="$base/$db"
psql "$url" -q -v ON_ERROR_STOP=1 -f schema.sql
reset() {
    psql "$url" -q -v ON_ERROR_STOP=1 -f down.sql -f "$1-up.sql" 2>/dev/null
    psql "$url" -q -c "TRUNCATE comments, private_post_comments, private_community_comments, private_person_comments, private_site_comments, communities_comments_slots, posts_comments_slots, sites_comments_slots, users_comments_slots"
}
echo "one session, 20,000 one-row INSERTs each committed (ms for all):"
for round in 1 2 3 4; do
    for v in lib nolock noagg private none; do
        reset $v
        echo "$round $v $(psql "$url" -q -f loop.sql | grep Time | awk '{print $2}')"
    done
done
echo "32 pgbench clients, BEGIN; INSERT; sleep 2 ms; COMMIT (tx/s, 6 s each):"
for round in 1 2 3 4 5; do
    for v in lib nolock noagg private; do
        reset $v
        echo "$round $v $(pgbench -n -M prepared -c 32 -j 2 -T 6 -f tx.pgbench "$url" 2>&1 | awk '/^tps/ {print $3}')"
    done
done
psql "$base/postgres" -q -c "DROP DATABASE $db"
