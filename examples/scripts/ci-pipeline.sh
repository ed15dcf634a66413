#!/usr/bin/env bash
# A fan-out/fan-in CI pipeline on cq: one build per branch (a key lane, so
# two pushes of one branch never build at once and run in push order),
# test shards that fan out after the build, and a report that fans in
# after every shard. It prints the report's output (if the report ran)
# and exits with cq wait's code: 0 if the whole pipeline passed, 1 if a
# task failed or was cancelled, 124 if CQ_PIPELINE_TIMEOUT (5m) passed
# first.
#
# Usage: ci-pipeline.sh BRANCH [SHARDS]
# A worker must be running on the same CQ_HOME (cq worker -c 4), or set
# CQ_PIPELINE_WORKER=1 to start one for the pipeline's duration.
set -euo pipefail
branch=${1:?usage: ci-pipeline.sh BRANCH [SHARDS]}
shards=${2:-3}
cq=${CQ:-cq}
out=$(mktemp -d)
worker=
# On the way out: stop the pipeline's worker, if any, then remove the
# scratch folder the tasks shared.
cleanup() {
	if [ -n "$worker" ]; then
		kill -TERM "$worker" 2>/dev/null || true
		wait "$worker" 2>/dev/null || true
	fi
	rm -rf "$out"
}
trap cleanup EXIT

if [ "${CQ_PIPELINE_WORKER:-0}" = 1 ]; then
	"$cq" worker --concurrency 4 >/dev/null 2>"$out/worker.log" &
	worker=$!
fi

build=$("$cq" enqueue --key "build:$branch" --queue ci -- \
	sh -c 'echo "building $1"; mkdir -p "$2" && echo artefact > "$2/app"' sh "$branch" "$out")

tests=()
for i in $(seq 1 "$shards"); do
	tests+=("$("$cq" enqueue --queue ci --after "$build" -- \
		sh -c 'test -s "$1/app" && echo "shard $2 ok" > "$1/shard-$2"' sh "$out" "$i")")
done
after=$(IFS=,; echo "${tests[*]}")
report=$("$cq" enqueue --queue ci --after "$after" -- \
	sh -c 'cat "$1"/shard-* | sort' sh "$out")

code=0
"$cq" wait "$report" --timeout "${CQ_PIPELINE_TIMEOUT:-5m}" || code=$?
# A report cancelled with a failed shard, or still waiting, has no output.
"$cq" logs "$report" 2>/dev/null || true
exit $code
