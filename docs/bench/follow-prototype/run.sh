#!/usr/bin/env bash
# Reproduces every measurement of README.md. Creates and drops its own databases
# (slotted_follow_proto_pg, slotted_follow_proto_my); touches nothing else.
#   ./run.sh postgres://postgres@127.0.0.1:5432 mysql://root@127.0.0.1:3306 [pg|mariadb|sqlite|all]
# ROUNDS (3) and SECS (20) set the throughput rounds. Results go to results/.
set -euo pipefail
cd "$(dirname "$0")"
export PG_BASE=${1:?postgres URL without a database} MY_URL=${2:?mysql URL}
what=${3:-all}
export ROUNDS=${ROUNDS:-3} SECS=${SECS:-20}
hp=${MY_URL#mysql://}; export MY_USER=${hp%%@*}; hp=${hp#*@}; hp=${hp%%/*}
export MY_HOST=${hp%%:*} MY_PORT=${hp##*:}; [[ $MY_PORT == "$MY_HOST" ]] && MY_PORT=3306
mkdir -p results
[[ $what == all || $what == pg ]] && ./pg.sh
[[ $what == all || $what == mariadb ]] && ./mariadb.sh
[[ $what == all || $what == sqlite ]] && ./sqlite.sh
exit 0
