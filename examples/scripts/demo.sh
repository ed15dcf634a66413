#!/usr/bin/env bash
# A real cq pipeline in a throw-away home: a key lane, a dependency, a
# flaky task retried on a short backoff, an approval gate, a worker that
# runs it all, then the listing and the event log.
# Usage: demo.sh [path/to/cq]
set -euo pipefail
cq=${1:-cq}
home=$(mktemp -d)
worker=
cleanup() {
	[ -n "$worker" ] && kill -TERM "$worker" 2>/dev/null && wait "$worker" 2>/dev/null
	rm -rf "$home"
}
trap cleanup EXIT
export CQ_HOME=$home/cq
bold=$(printf '\033[1m') plain=$(printf '\033[0m')
step() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; }
# run shows the command as a user would type it (cq, not the path of the
# binary the demo uses), then runs it.
run() {
	local shown=("$@")
	[ "$1" = "$cq" ] && shown[0]=cq
	step "${shown[@]}"
	"$@"
}

step 'build=$(cq enqueue --key site -- sh -c "echo building; sleep 0.3")'
build=$("$cq" enqueue --key site -- sh -c 'echo building; sleep 0.3'); echo "$build"
step 'deploy=$(cq enqueue --key site --after $build -- echo deploying)'
deploy=$("$cq" enqueue --key site --after "$build" -- echo deploying); echo "$deploy"
run "$cq" queue set flaky --backoff 1s
step 'flaky=$(cq enqueue --queue flaky --retries 3 --shell "test \$CQ_ATTEMPT -ge 2 || { echo no luck >&2; exit 1; }")'
flaky=$("$cq" enqueue --queue flaky --retries 3 --shell 'test $CQ_ATTEMPT -ge 2 || { echo no luck >&2; exit 1; }'); echo "$flaky"
step 'gate=$(cq enqueue --hold -- echo approved)'
gate=$("$cq" enqueue --hold -- echo approved); echo "$gate"
run "$cq" ls

step 'cq worker --concurrency 4 2>worker.log &'
"$cq" worker --concurrency 4 2>"$home/worker.log" &
worker=$!
run "$cq" release "$gate"
run "$cq" wait "$build" "$deploy" "$flaky" "$gate" --timeout 30s
run "$cq" ls
run "$cq" show "$flaky"
run "$cq" logs "$deploy"
run "$cq" logs "$flaky" --run 1 --stderr
step "cq events | tail -n 4"
"$cq" events | tail -n 4
step "head -n 3 worker.log"
head -n 3 "$home/worker.log"
