#!/usr/bin/env bash
# Forwards every cq event to a webhook, one POST per event (the JSON line
# as the body), and remembers the last seq it delivered, so that a restart
# resumes without repeats or gaps (cq events --since is resumable by seq).
# A failed POST stops the script with exit 1; the event is sent again on
# the next start (at least once).
#
# Usage: events-to-webhook.sh URL [SEQ_FILE]
#   From cron (one pass over what is new):  events-to-webhook.sh https://hooks.example/cq
#   As a service (streams forever):         SYNC_FOLLOW=1 events-to-webhook.sh https://hooks.example/cq
set -euo pipefail
url=${1:?usage: events-to-webhook.sh URL [SEQ_FILE]}
cq=${CQ:-cq}
seqfile=${2:-${CQ_HOME:-${XDG_STATE_HOME:-$HOME/.local/state}/cq}/webhook.seq}
mkdir -p "$(dirname "$seqfile")"
since=$(cat "$seqfile" 2>/dev/null || echo 0)
follow=()
[ "${SYNC_FOLLOW:-0}" = 1 ] && follow=(--follow)

exec 3< <("$cq" events --since "$since" "${follow[@]}")
events=$!
trap 'kill "$events" 2>/dev/null || true' EXIT
while IFS= read -r line <&3; do
	if ! curl -fsS --max-time 10 -X POST -H 'Content-Type: application/json' --data-binary "$line" "$url" >/dev/null; then
		echo "events-to-webhook: POST failed; stopped before seq $(jq -r .seq <<<"$line")" >&2
		exit 1
	fi
	seq=$(jq -r .seq <<<"$line")
	# Written to a temporary file and renamed: a crash never leaves half a number.
	printf '%s\n' "$seq" >"$seqfile.tmp"
	mv "$seqfile.tmp" "$seqfile"
done
# One pass: report cq's own failure, if any.
wait "$events"
