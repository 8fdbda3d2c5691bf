#!/usr/bin/env python3
"""One compaction batch's statements on MariaDB, several ways, by hand in the mariadb client.

    python3 docs/bench/scale-mysql-fold-statements.py [ROUNDS] [WAY ...]

Makes its own database `slotted_proto` (dropped at the end) on the server the `mysql` client
reaches with `-uroot -h127.0.0.1`; each way runs on a fresh copy of the same rows, in one
transaction, timed by the server's session profiling (SET profiling=1; SHOW PROFILES), the
rows sent back as literals. Prints each round's statement times and each way's median batch.

Data: src (record_id INT, slot SMALLINT, count BIGINT, PRIMARY KEY (record_id, slot)),
100,000 records with 1 + (r % 7) rows each (+20 for r < 1000). The batch: records
50001..51000, 3,997 rows, of which 2,997 go and 857 records keep their lowest slot with the sum.
Every way must leave the same 1,000 rows with the same sum (checked).
"""
import json
import statistics
import subprocess
import sys
from itertools import groupby

MYSQL = ["mysql", "-uroot", "-h127.0.0.1", "-N"]
rows = {}
for r in range(1, 100001):
    n = 1 + (r % 7) + (20 if r < 1000 else 0)
    rows[r] = [(s, 1 + (r * 7 + s) % 5) for s in range(n)]
lo, hi = 50001, 51000
dels, ups = [], []
for r in range(lo, hi + 1):
    if len(rows[r]) > 1:
        dels += [(r, s) for (s, _) in rows[r][1:]]
        ups.append((r, rows[r][0][0], sum(c for _, c in rows[r])))


def tuples(rs):
    return ", ".join("(" + ", ".join(str(v) for v in row) + ")" for row in rs)


def union(rs, names):
    first = "SELECT " + ", ".join(f"{v} AS {n}" for v, n in zip(rs[0], names))
    rest = ["SELECT " + ", ".join(str(v) for v in row) for row in rs[1:]]
    return " UNION ALL ".join([first] + rest)


lock = (f"SELECT record_id, slot, count FROM t WHERE record_id BETWEEN {lo} AND {hi} "
        "ORDER BY record_id, slot FOR UPDATE SKIP LOCKED;")
join = "ON t.record_id = slotted_rows.record_id AND t.slot = slotted_rows.slot"
upsert = (f"INSERT INTO t (record_id, slot, count) VALUES {tuples(ups)} "
          "ON DUPLICATE KEY UPDATE count = VALUES(count);")
doc = json.dumps([[r, s] for r, s in dels], separators=(",", ":"))
cols = ("record_id INT PATH '$[0]' ERROR ON EMPTY ERROR ON ERROR, "
        "slot SMALLINT PATH '$[1]' ERROR ON EMPTY ERROR ON ERROR")
where = f"record_id BETWEEN {lo} AND {hi}"
grouped = " OR ".join(
    f"(record_id = {r} AND slot IN ({', '.join(str(s) for _, s in g)}))"
    for r, g in groupby(dels, key=lambda x: x[0]))
WAYS = {
    # compact_all before 2026-11-26 (second session)
    "union": [lock,
              f"DELETE t FROM ({union(dels, ['record_id', 'slot'])}) AS slotted_rows STRAIGHT_JOIN t {join};",
              f"INSERT INTO t (record_id, slot, count) SELECT * FROM ({union(ups, ['record_id', 'slot', 'count'])}) "
              "AS slotted_new ON DUPLICATE KEY UPDATE count = slotted_new.count;"],
    # compact_all since
    "json": [lock,
             f"DELETE t FROM JSON_TABLE('{doc}', '$[*]' COLUMNS ({cols})) AS slotted_rows STRAIGHT_JOIN t {join};",
             upsert],
    # a row-constructor IN list: fast, but ranges on record_id only (EXPLAIN key_len 4)
    "inlist": [lock, f"DELETE FROM t WHERE (record_id, slot) IN ({tuples(dels)});", upsert],
    # full-key ranges, slow to plan
    "grouped": [lock, f"DELETE FROM t WHERE {grouped};", upsert],
    # the scale benchmark's anchor, its rows locked first
    "hand": [f"SELECT COUNT(*) FROM (SELECT record_id FROM t WHERE {where} FOR UPDATE SKIP LOCKED) q;",
             f"UPDATE t a JOIN (SELECT record_id, MIN(slot) AS slot, SUM(count) AS total FROM t WHERE {where} "
             "GROUP BY record_id HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot = f.slot "
             "SET a.count = f.total;",
             f"DELETE a FROM t a JOIN (SELECT record_id, MIN(slot) AS slot FROM t WHERE {where} GROUP BY record_id "
             "HAVING COUNT(*) > 1) f ON a.record_id = f.record_id AND a.slot > f.slot;"],
}


def mysql(sql):
    return subprocess.run(MYSQL, input=sql, capture_output=True, text=True, check=True).stdout


def setup():
    allrows = [(r, s, c) for r in rows for (s, c) in rows[r]]
    sql = ["DROP DATABASE IF EXISTS slotted_proto; CREATE DATABASE slotted_proto; USE slotted_proto;",
           "CREATE TABLE src (record_id INT NOT NULL, slot SMALLINT NOT NULL, count BIGINT NOT NULL, "
           "PRIMARY KEY (record_id, slot)) ENGINE=InnoDB;"]
    sql += [f"INSERT INTO src VALUES {tuples(allrows[i:i + 5000])};" for i in range(0, len(allrows), 5000)]
    mysql("\n".join(sql))


def run(way):
    sql = ["USE slotted_proto; DROP TABLE IF EXISTS t; CREATE TABLE t LIKE src; "
           "INSERT INTO t SELECT * FROM src; ANALYZE TABLE t;",
           "SET profiling=1; SET profiling_history_size=20; BEGIN;", *WAYS[way], "COMMIT;",
           f"SELECT 'CHECK', COUNT(*), SUM(count) FROM t WHERE {where};", "SELECT 'PROF';", "SHOW PROFILES;"]
    out = mysql("\n".join(sql))
    check = [line for line in out.splitlines() if line.startswith("CHECK")]
    assert check == ["CHECK\t1000\t11991"], (way, check)
    parts, on = [], False
    for line in out.split("PROF", 1)[1].strip().splitlines():
        _, duration, text = line.split("\t", 2)
        if text.startswith("BEGIN"):
            on = True
            continue
        if on:
            parts.append((text.split(" ", 1)[0], float(duration) * 1000))
        if text.startswith("COMMIT"):
            break
    return parts


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ways = sys.argv[2:] or ["hand", "union", "json", "inlist"]
    setup()
    batches = {w: [] for w in ways}
    try:
        for _ in range(rounds):
            for way in ways:
                parts = run(way)
                batches[way].append(sum(d for _, d in parts))
                print(f"{way:8}", " ".join(f"{t} {d:.1f}" for t, d in parts), f"= {batches[way][-1]:.1f} ms")
        for way in ways:
            print(f"{way:8} median batch {statistics.median(batches[way]):.1f} ms, "
                  f"lowest {min(batches[way]):.1f}, highest {max(batches[way]):.1f}")
    finally:
        mysql("DROP DATABASE IF EXISTS slotted_proto;")


if __name__ == "__main__":
    main()
