#!/usr/bin/env bash
# A real cq pipeline in a throw-away home: a key lane, a dependency, a
# flaky task with a retry budget, a held approval gate, then the listing and
# the event log. Usage: demo.sh [path/to/cq]
set -euo pipefail
cq=${1:-cq}
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export CQ_HOME=$home/cq

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step cq enqueue --key deploy -- echo build
build=$("$cq" enqueue --key deploy -- echo build); echo "$build"
step cq enqueue --key deploy --after "$build" -- echo deploy
deploy=$("$cq" enqueue --key deploy --after "$build" -- echo deploy); echo "$deploy"
step cq enqueue --retries 3 --shell 'test $CQ_ATTEMPT -ge 2'
flaky=$("$cq" enqueue --retries 3 --queue flaky --shell 'test $CQ_ATTEMPT -ge 2'); echo "$flaky"
step cq enqueue --hold -- echo approved
gate=$("$cq" enqueue --hold -- echo approved); echo "$gate"
step cq release "$gate"
"$cq" release "$gate"
step cq queue set flaky --backoff 1s --concurrency 2
"$cq" queue set flaky --backoff 1s --concurrency 2
step cq ls
"$cq" ls
step cq queue ls
"$cq" queue ls
step cq show "$deploy"
"$cq" show "$deploy"
step "cq events | tail -n 3"
"$cq" events | tail -n 3
