#!/usr/bin/env bash
# Generates the PostgreSQL trigger DDL the library would emit for a counter that follows
# `comments`, in two shapes: row (FOR EACH ROW) and statement (FOR EACH STATEMENT with
# transition tables). Usage: gen.sh row|statement|down > file.sql
# Each counter: name | slot table | key over R | filter over R | value over R | watched columns
set -euo pipefail
shape=$1
COUNTERS=(
"posts_comments|posts_comments_slots|R.post_id|NOT R.deleted AND NOT R.removed|1|post_id, deleted, removed"
"posts_score|posts_score_slots|R.post_id|true|R.score|post_id, score"
"users_comments|users_comments_slots|R.author_id|NOT R.deleted AND NOT R.removed|1|author_id, deleted, removed"
"communities_comments|communities_comments_slots|(SELECT p.community_id FROM posts p WHERE p.id = R.post_id)|NOT R.deleted AND NOT R.removed|1|post_id, deleted, removed"
"sites_comments|sites_comments_slots|0|R.local|1|local"
)
# Only these counters when SLOTTED_COUNTERS is set (space separated names).
sub() { local s=${1//R./$2.}; echo "$s"; }

# The writer index, as slot.rs: the setting, else the advisory lock the session already
# holds, else the smallest free index, else 1024 + pid % 1024.
TAKE='    w := NULLIF(current_setting('"'"'slotted.writer'"'"', true), '"''"')::integer;
    IF w IS NULL THEN
        SELECT min(objid::bigint) INTO w FROM pg_locks
         WHERE locktype = '"'"'advisory'"'"' AND classid = 1936486260 AND objsubid = 2
           AND pid = pg_backend_pid()
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database());
        IF w IS NULL THEN
            SELECT i INTO w FROM generate_series(0, 1023) AS i
             WHERE pg_try_advisory_lock(1936486260, i) LIMIT 1;
        END IF;
        w := coalesce(w, 1024 + pg_backend_pid() % 1024);
        PERFORM set_config('"'"'slotted.writer'"'"', w::text, false);
    END IF;
    s := (w % TG_ARGV[0]::integer)::smallint;'

for spec in "${COUNTERS[@]}"; do
  IFS='|' read -r name tbl key filter value cols <<<"$spec"
  if [[ -n "${SLOTTED_COUNTERS:-}" && " $SLOTTED_COUNTERS " != *" $name "* ]]; then continue; fi
  fn="slotted_follow_${name}"
  case $shape in
  row) cat <<EOF
-- counter ${name}: key ${key}, filter ${filter}, value ${value}
CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS \$\$
DECLARE
    w integer; s smallint;
    ok bigint; od bigint := 0; nk bigint; nd bigint := 0;
BEGIN
    IF TG_OP <> 'INSERT' AND ($(sub "$filter" OLD)) THEN
        ok := $(sub "$key" OLD);
        IF ok IS NOT NULL THEN od := -coalesce($(sub "$value" OLD), 0); END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND ($(sub "$filter" NEW)) THEN
        nk := $(sub "$key" NEW);
        IF nk IS NOT NULL THEN nd := coalesce($(sub "$value" NEW), 0); END IF;
    END IF;
    IF ok = nk THEN nd := nd + od; od := 0; END IF;
    IF od = 0 AND nd = 0 THEN RETURN NULL; END IF;
$TAKE
    -- A move writes two rows: lower key first, the order of the statement shape.
    IF od <> 0 AND (nd = 0 OR ok < nk) THEN
        INSERT INTO ${tbl} AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
        od := 0;
    END IF;
    IF nd <> 0 THEN
        INSERT INTO ${tbl} AS t (record_id, slot, count) VALUES (nk, s, nd)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    IF od <> 0 THEN
        INSERT INTO ${tbl} AS t (record_id, slot, count) VALUES (ok, s, od)
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END \$\$;
CREATE TRIGGER ${fn}_insert AFTER INSERT ON comments FOR EACH ROW
    WHEN ($(sub "$filter" NEW)) EXECUTE FUNCTION ${fn}(:'slots');
CREATE TRIGGER ${fn}_delete AFTER DELETE ON comments FOR EACH ROW
    WHEN ($(sub "$filter" OLD)) EXECUTE FUNCTION ${fn}(:'slots');
CREATE TRIGGER ${fn}_update AFTER UPDATE OF ${cols} ON comments FOR EACH ROW
    EXECUTE FUNCTION ${fn}(:'slots');

EOF
  ;;
  statement)
    k_new=$(sub "$key" n); k_old=$(sub "$key" o)
    cat <<EOF
-- counter ${name}: key ${key}, filter ${filter}, value ${value}
CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS \$\$
DECLARE
    w integer; s smallint;
BEGIN
$TAKE
    -- The statement's deltas per parent, upserted in key order in one statement: two
    -- statements that share a slot lock its rows in the same order (no deadlock).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO ${tbl} AS t (record_id, slot, count)
        SELECT k, s, d FROM (SELECT ${k_new} AS k, sum(coalesce($(sub "$value" n), 0)) AS d
                             FROM slotted_new AS n WHERE $(sub "$filter" n) GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO ${tbl} AS t (record_id, slot, count)
        SELECT k, s, -d FROM (SELECT ${k_old} AS k, sum(coalesce($(sub "$value" o), 0)) AS d
                              FROM slotted_old AS o WHERE $(sub "$filter" o) GROUP BY 1) AS x
         WHERE k IS NOT NULL AND d <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    ELSE
        INSERT INTO ${tbl} AS t (record_id, slot, count)
        SELECT k, s, sum(d) FROM (
            SELECT ${k_new} AS k, coalesce($(sub "$value" n), 0) AS d FROM slotted_new AS n WHERE $(sub "$filter" n)
            UNION ALL
            SELECT ${k_old}, -coalesce($(sub "$value" o), 0) FROM slotted_old AS o WHERE $(sub "$filter" o)) AS x
         WHERE k IS NOT NULL GROUP BY k HAVING sum(d) <> 0 ORDER BY k
        ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END \$\$;
CREATE TRIGGER ${fn}_insert AFTER INSERT ON comments REFERENCING NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION ${fn}(:'slots');
CREATE TRIGGER ${fn}_delete AFTER DELETE ON comments REFERENCING OLD TABLE AS slotted_old
    FOR EACH STATEMENT EXECUTE FUNCTION ${fn}(:'slots');
CREATE TRIGGER ${fn}_update AFTER UPDATE ON comments REFERENCING OLD TABLE AS slotted_old NEW TABLE AS slotted_new
    FOR EACH STATEMENT EXECUTE FUNCTION ${fn}(:'slots');

EOF
  ;;
  down) cat <<EOF
DROP TRIGGER IF EXISTS ${fn}_insert ON comments;
DROP TRIGGER IF EXISTS ${fn}_delete ON comments;
DROP TRIGGER IF EXISTS ${fn}_update ON comments;
DROP FUNCTION IF EXISTS ${fn}();
EOF
  ;;
  esac
done
