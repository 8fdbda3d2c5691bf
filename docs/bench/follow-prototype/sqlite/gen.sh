#!/usr/bin/env bash
# SQLite trigger DDL for counters that follow `comments`. One writer at a time: every
# trigger writes slot 0 (a slot spreads nothing on SQLite). Usage: gen.sh up|down
set -euo pipefail
shape=$1
COUNTERS=(
"posts_comments|posts_comments_slots|R.post_id|NOT R.deleted AND NOT R.removed|1|post_id, deleted, removed"
"posts_score|posts_score_slots|R.post_id|1|R.score|post_id, score"
"users_comments|users_comments_slots|R.author_id|NOT R.deleted AND NOT R.removed|1|author_id, deleted, removed"
"communities_comments|communities_comments_slots|(SELECT p.community_id FROM posts p WHERE p.id = R.post_id)|NOT R.deleted AND NOT R.removed|1|post_id, deleted, removed"
"sites_comments|sites_comments_slots|0|R.local|1|local"
)
sub() { local s=${1//R./$2.}; echo "$s"; }
for spec in "${COUNTERS[@]}"; do
  IFS='|' read -r name tbl key filter value cols <<<"$spec"
  fn="slotted_follow_${name}"
  if [[ $shape == down ]]; then
    for ev in insert delete update; do echo "DROP TRIGGER IF EXISTS ${fn}_${ev};"; done; continue
  fi
  add() { # row alias, sign
    echo "    INSERT INTO ${tbl} (record_id, slot, count)
    SELECT k, 0, d FROM (SELECT $(sub "$key" $1) AS k, $2coalesce($(sub "$value" $1), 0) AS d)
     WHERE k IS NOT NULL AND d <> 0 AND ($(sub "$filter" $1))
    ON CONFLICT (record_id, slot) DO UPDATE SET count = count + excluded.count;"
  }
  cat <<EOF
CREATE TRIGGER ${fn}_insert AFTER INSERT ON comments FOR EACH ROW WHEN $(sub "$filter" NEW) BEGIN
$(add NEW +)
END;
CREATE TRIGGER ${fn}_delete AFTER DELETE ON comments FOR EACH ROW WHEN $(sub "$filter" OLD) BEGIN
$(add OLD -)
END;
CREATE TRIGGER ${fn}_update AFTER UPDATE OF ${cols} ON comments FOR EACH ROW BEGIN
$(add OLD -)
$(add NEW +)
END;
EOF
done
