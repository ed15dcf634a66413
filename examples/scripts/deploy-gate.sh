#!/usr/bin/env bash
# A deploy gated by an operator's approval. The deploy runs as a cq task;
# before it touches production it asks (cq ask) and waits, holding its
# place, until someone answers from another shell:
#
#   cq asks                                  # what waits for an answer
#   cq answer TASK --approve --reason "LGTM"  # or --deny --reason "freeze"
#
# Usage:
#   deploy-gate.sh enqueue VERSION   enqueue the gated deploy, print its id
#   deploy-gate.sh deploy VERSION    the task itself (run by a cq worker)
#
# The question is denied after CQ_GATE_TIMEOUT (default 30m), when the task
# is cancelled, or when its worker shuts down; the deploy then exits 1
# without touching anything.
set -euo pipefail
cq=${CQ:-cq}
what=${1:?usage: deploy-gate.sh enqueue|deploy VERSION}
version=${2:?usage: deploy-gate.sh enqueue|deploy VERSION}

case $what in
enqueue)
	# One deploy at a time (the key's lane), never retried by itself.
	exec "$cq" enqueue --key deploy:production --retries 0 -- "$(realpath "$0")" deploy "$version"
	;;
deploy)
	echo "built $version; waiting for approval"
	if reason=$("$cq" ask "deploy $version to production?" --timeout "${CQ_GATE_TIMEOUT:-30m}"); then
		echo "approved${reason:+: $reason}"
		for step in drain switch verify; do
			"$cq" progress "$step"
			echo "deploying $version: $step"
		done
		echo "deployed $version"
	else
		echo "not deployed: the question was denied"
		exit 1
	fi
	;;
*)
	echo "deploy-gate.sh: unknown action $what (want enqueue or deploy)" >&2
	exit 2
	;;
esac
