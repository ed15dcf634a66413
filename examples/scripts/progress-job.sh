#!/usr/bin/env bash
# A long job that reports its progress: cq ls, cq show, cq wait (on a
# terminal) and the event stream show how far it got while it runs.
#
# Usage (as a task): cq enqueue -- progress-job.sh [ITEMS]
# It processes ITEMS (default 20) items, reporting each one, and prints a
# line per item. Outside a task it runs the same without the reports.
set -euo pipefail
cq=${CQ:-cq}
items=${1:-20}
report() {
	if [ -n "${CQ_RUN_ID:-}" ]; then
		"$cq" progress "$@"
	fi
}
report --done 0 --total "$items" "starting"
for i in $(seq 1 "$items"); do
	# The work of one item would go here.
	echo "item $i of $items"
	report --done "$i" --total "$items" "item $i"
done
echo "processed $items items"
