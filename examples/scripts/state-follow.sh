#!/usr/bin/env bash
# Keeps a view of cq's tasks (task id → state) in step with the store, as
# a sync to an external tracker would: one snapshot (cq state), then the
# event log from the snapshot's seq (cq events --since SEQ --follow), so
# that no change is missed and none is seen twice. It prints one line per
# task of the snapshot, then one line per change of a task's state:
#
#   TASK_ID<TAB>STATE
#
# (a new task shows as inbox, then as what the gateway made of it). Put
# the call to the tracker where the line is printed.
#
# Usage: state-follow.sh [--all] [--queue Q]
#   --all        start from every task, ended ones included (default: those not ended)
#   --queue Q    only Q's tasks in the snapshot (the events are all followed)
#   SYNC_FOLLOW=0 stops at the current end of the log instead of following it.
# Needs jq.
set -euo pipefail
cq=${CQ:-cq}
command -v jq >/dev/null || {
	echo "state-follow: needs jq" >&2
	exit 1
}
declare -A state # task id → state, as the tracker was last told

snapshot=$("$cq" state "$@" -o jsonl)
since=$(jq -r .seq <<<"$snapshot")
while IFS=$'\t' read -r id st; do
	state[$id]=$st
	printf '%s\t%s\n' "$id" "$st"
done < <(jq -r '.tasks | reverse[] | [.id, .state] | @tsv' <<<"$snapshot")

follow=(--follow)
[ "${SYNC_FOLLOW:-1}" = 0 ] && follow=()
# Every task event's "to" is its task's state after it (task.created's is
# inbox); an event that leaves the state as it was (task.held on a
# blocked task, task.changed, task.waiting) is no change to report.
exec 3< <("$cq" events --since "$since" "${follow[@]}" |
	jq --unbuffered -r 'select((.kind | startswith("task.")) and .task_id != null and .to != null) | [.task_id, .to] | @tsv')
events=$!
trap 'kill "$events" 2>/dev/null || true' EXIT
while IFS=$'\t' read -r id st <&3; do
	if [ "${state[$id]:-}" != "$st" ]; then
		state[$id]=$st
		printf '%s\t%s\n' "$id" "$st"
	fi
done
wait "$events"
