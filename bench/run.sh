#!/usr/bin/env bash
# bench/run.sh [path/to/cq] — what make bench runs, in one go:
#
#   1. the Go benchmarks of internal/queue, -benchmem, BENCH_COUNT (6) runs
#      each, raw output in $BENCH_OUT/go.txt, summarised by benchstat
#      (and compared with bench/baseline.txt when that file exists);
#   2. bench/e2e.sh: cq end to end against a Go spawn reference, xargs,
#      tsp, GNU parallel and nq, plus the enqueue-call, latency, RSS and
#      WAL figures (report in e2e.txt, figures in e2e.env);
#   3. cq serve under load (TestServeLoad, without the race detector): 200
#      event streams and 1000 POSTs/s for 10 s, on SQLite and on PostgreSQL
#      (where one is reachable), its figures in serve.txt;
#   4. bench/goals.sh: the goals table, PASS/MISS, from the figures of 1 and 2.
#
# Environment: GO (go), BENCHSTAT (benchstat on PATH), BENCH_COUNT (6),
# BENCH_OUT (bench/out), BENCH_PAUSE (20: seconds of rest between the two
# parts), BENCH_SETTLE and BENCH_CALM_US (see settle), BENCH_PARTS ("go e2e serve"; "go" alone skips the end-to-end run, its
# goals are then n/a), and e2e.sh's own knobs (RUNS, N, …, see
# bench/README.md). Exits non-zero if a part failed to run; a
# MISS is not a failure.
{ # bash reads this whole block before running it: the file may change meanwhile
set -uo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1
GO=${GO:-go}
BENCHSTAT=${BENCHSTAT:-benchstat}
BENCH_COUNT=${BENCH_COUNT:-6}
OUT=${BENCH_OUT:-bench/out}
PARTS=" ${BENCH_PARTS:-go e2e serve} "
CQ=${1:-$repo/bin/cq}
status=0

mkdir -p "$OUT" || exit 1
rm -f "$OUT/serve.txt" "$OUT/go.txt" "$OUT/benchstat.txt" "$OUT/benchstat-baseline.txt" "$OUT/e2e.txt" "$OUT/e2e.env" "$OUT/goals.txt"
section() { printf '\n### %s\n\n' "$*"; }

# settle waits, up to BENCH_SETTLE (240) seconds, until making a run folder
# (bench/floor files: mkdir and three files, as cq's worker does) costs at
# most BENCH_CALM_US (150) µs. On an ext4 without a journal, inodes freed
# in the last minute or more are skipped when new ones are allocated, so
# after a big delete (a test suite's, the Go benchmarks') every new file
# costs several times more for minutes: cq, the floor and the peers make
# files per task, the spawn reference none, so a run in that state
# understates every ratio. It goes on after the deadline, saying so.
settle() {
	local probe us i t0=$SECONDS max=${BENCH_SETTLE:-240} calm=${BENCH_CALM_US:-150}
	make -s bench-bins >/dev/null || return 0
	probe=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/cq-settle.XXXXXX") || return 0
	for ((i = 0; ; i++)); do
		mkdir -p "$probe/$i" && us=$(bin/floor files "$probe/$i" 300 2>/dev/null) || break
		if awk -v u="$us" -v c="$calm" 'BEGIN { exit !(u <= c) }'; then
			echo "the disk is calm: a run folder costs $us µs (after $((SECONDS - t0)) s)"
			break
		fi
		if ((SECONDS - t0 >= max)); then
			echo "the disk is still slow after $max s: a run folder costs $us µs (calm is <= $calm); going on"
			break
		fi
		echo "a run folder costs $us µs (calm is <= $calm µs); waiting for the disk to settle"
		sleep 15
	done
	# A few thousand inodes: small enough not to slow what follows.
	rm -rf "$probe"
}

if [[ $PARTS == *" go "* ]]; then
	section "Go benchmarks: internal/queue, -benchmem -count $BENCH_COUNT (raw output: $OUT/go.txt)"
	if ! "$GO" test -run '^$' -bench . -benchmem -count "$BENCH_COUNT" -timeout 60m ./internal/queue | tee "$OUT/go.txt"; then
		echo "bench: the Go benchmarks failed" >&2
		status=1
	fi
	if ! command -v "$BENCHSTAT" >/dev/null; then
		echo "bench: no benchstat ($BENCHSTAT); make bench installs it into ./bin" >&2
		status=1
	elif [[ -s $OUT/go.txt ]]; then
		section "benchstat $OUT/go.txt"
		{
			"$BENCHSTAT" "$OUT/go.txt"
			echo
			echo "claim+complete, 1M backlog against 1k (64 in flight, then one at a time):"
			"$BENCHSTAT" -filter '.name:ClaimCompleteBatched .unit:cycles/s' -col /backlog "$OUT/go.txt" | grep -Ev '^(goos|goarch|pkg|cpu):'
			"$BENCHSTAT" -filter '.name:ClaimComplete .unit:cycles/s' -col /backlog "$OUT/go.txt" | grep -Ev '^(goos|goarch|pkg|cpu):'
			echo
			echo "500 tasks beside 100k lane-blocked ones against 500 alone:"
			"$BENCHSTAT" -filter '.name:ClaimBesideBlockedLane' "$OUT/go.txt" | grep -Ev '^(goos|goarch|pkg|cpu):'
		} | tee "$OUT/benchstat.txt"
		if [[ -s bench/baseline.txt ]]; then
			section "benchstat bench/baseline.txt against this run"
			"$BENCHSTAT" baseline=bench/baseline.txt new="$OUT/go.txt" | tee "$OUT/benchstat-baseline.txt"
		fi
	fi
fi

if [[ $PARTS == *" e2e "* ]]; then
	if [[ $PARTS == *" go "* ]] && ((${BENCH_PAUSE:-20} > 0)); then
		# The Go benchmarks just deleted their stores (several hundred MB); on a disk
		# with online discard that slows file operations for a while, which
		# showed as a slow first e2e round for every tool.
		echo "pausing ${BENCH_PAUSE:-20} s for the disk to settle after the Go benchmarks' stores were deleted"
		sync
		sleep "${BENCH_PAUSE:-20}"
	fi
	settle
	section "end to end: bench/e2e.sh $CQ (report: $OUT/e2e.txt)"
	if ! RESULTS=$OUT/e2e.env ./bench/e2e.sh "$CQ" 2>&1 | tee "$OUT/e2e.txt"; then
		echo "bench: bench/e2e.sh failed" >&2
		status=1
	fi
fi

if [[ $PARTS == *" serve "* ]]; then
	section "cq serve under load: TestServeLoad on SQLite, then PostgreSQL (report: $OUT/serve.txt)"
	for db in sqlite postgres; do
		echo "$db:"
		if ! CQ_TEST_DB=$db "$GO" test -run '^TestServeLoad$' -count=1 -v ./cmd/cq 2>&1 |
			grep -E '^\s*(serve_load_test.go|--- |ok|FAIL)' | grep -v '^\s*{'; then
			echo "bench: TestServeLoad failed on $db" >&2
			status=1
		fi
	done | tee "$OUT/serve.txt"
fi

./bench/goals.sh "$OUT/go.txt" "$OUT/e2e.env" | tee "$OUT/goals.txt"
echo "(all of it is in $OUT/)"
exit "$status"
}
