#!/usr/bin/env bash
# A deploy that drains a queue first: it pauses the queue (nothing new
# starts; tasks enqueued meanwhile wait in it), waits for the runs active
# now to end (cq wait --active: only those, whatever their end), runs the
# deploy command, and resumes the queue, whatever happened.
#
# Usage: drain-deploy.sh QUEUE DEPLOY_COMMAND [ARGS…]
#   DRAIN_TIMEOUT (default 10m): how long to wait for the drain. If the
#   runs have not all ended by then, nothing is deployed and the script
#   exits 124 (cq wait's code), naming them on stderr; the queue is resumed.
# Exits with the deploy command's code otherwise.
set -euo pipefail
queue=${1:?usage: drain-deploy.sh QUEUE DEPLOY_COMMAND [ARGS…]}
shift
[ $# -gt 0 ] || {
	echo "usage: drain-deploy.sh QUEUE DEPLOY_COMMAND [ARGS…]" >&2
	exit 2
}
cq=${CQ:-cq}

"$cq" queue pause "$queue"
trap '"$cq" queue resume "$queue"' EXIT
"$cq" wait --active --queue "$queue" --timeout "${DRAIN_TIMEOUT:-10m}" || {
	status=$?
	echo "drain-deploy: queue $queue did not drain; nothing deployed" >&2
	exit "$status"
}
"$@"
