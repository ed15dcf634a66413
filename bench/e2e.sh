#!/usr/bin/env bash
# bench/e2e.sh [path/to/cq] — end-to-end benchmark of cq against the tools a
# user would pick instead (xargs, GNU parallel, task-spooler, nq) and of the
# floor of its contract (bench/floor run), all run in
# one go on this machine so that the ratios are measured under the same
# noise. bench/README.md says what each figure means.
#
# Knobs (environment): RUNS (rounds of the throughput table, default 5),
# N (tasks per throughput run, 2000), WARMUP_N (tasks per tool in the untimed
# warm-up round, 100), CALLS (single enqueue calls per tool,
# 200), LAT_SAMPLES (enqueue→start samples, 200), RSS_CONC (worker
# concurrency for the RSS figure, 16), WAL_N (tasks in the WAL run, 100000),
# WAL_MAX_SECONDS (time budget of the WAL run, 300), BENCH_DIR (parent of the
# scratch folder, default $TMPDIR or /tmp), KEEP=1 (keep the scratch folder),
# NO_INSTALL=1 (do not apt-get install missing peers), SKIP="tsp parallel nq"
# (leave those peers out), RESULTS=FILE (also write every figure there as
# key=value lines, for bench/goals.sh).
# shellcheck disable=SC2317 # functions called as "run_$tool" and from traps
{ # bash reads this whole block before running it: the file may change meanwhile
set -uo pipefail
export LC_ALL=C # EPOCHREALTIME and printf must use '.' as the decimal point

RUNS=${RUNS:-5}
N=${N:-2000}
TASKS=$N
WARMUP_N=${WARMUP_N:-100}
CALLS=${CALLS:-200}
LAT_SAMPLES=${LAT_SAMPLES:-200}
RSS_CONC=${RSS_CONC:-16}
WAL_N=${WAL_N:-100000}
WAL_MAX_SECONDS=${WAL_MAX_SECONDS:-300}
CONC=4 # slots for every tool in the throughput table

for v in RUNS N WARMUP_N CALLS LAT_SAMPLES RSS_CONC WAL_N WAL_MAX_SECONDS; do
	if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
		echo "e2e: $v must be a positive integer (got '${!v}')" >&2
		exit 1
	fi
done

script_start=$EPOCHREALTIME
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cq_arg=${1:-./bin/cq}
[[ -n ${RESULTS:-} && $RESULTS != /* ]] && RESULTS=$PWD/$RESULTS # the script changes folder
cq_shown=${1:-}

say() { printf '%s\n' "$*"; }
warn() { printf 'e2e: %s\n' "$*" >&2; }
die() {
	warn "$*"
	exit 1
}

# --- the cq binary and the spawn reference ---------------------------------

if [[ $# -eq 0 ]]; then
	cq_arg=$repo/bin/cq
	if [[ ! -x $cq_arg ]]; then
		say "building bin/cq (make build)"
		make -s -C "$repo" build || die "cannot build cq"
	fi
fi
[[ -x $cq_arg ]] || die "no executable cq at $cq_arg"
CQ=$(cd "$(dirname "$cq_arg")" && pwd)/$(basename "$cq_arg")

root=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/cq-e2e.XXXXXX") || die "mktemp failed"
bg_pids=()
cleanup() {
	local p
	for p in "${bg_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	if [[ ${KEEP:-0} == 1 ]]; then
		say "kept $root"
	else
		# After every timing: a big delete on this disk (online discard) slows
		# the metadata operations that follow it for a while.
		local t0=$EPOCHREALTIME
		rm -rf "$root"
		say "removed the scratch folder in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

repo_rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo '(no git)')
# The floor is built as bin/cq is (the Makefile's BUILD_LDFLAGS): its
# one-insert call is the floor of a cq call.
make -s -C "$repo" bench-bins || die "cannot build bench/floor and bench/spawnref (make bench-bins)"
SPAWNREF=$repo/bin/spawnref
FLOOR=$repo/bin/floor

# Every tool's tasks run with the scratch folder as their working folder.
cd "$root" || die "cannot enter $root"

# Sleep without forking: read with a timeout from a FIFO nobody writes to.
mkfifo "$root/.nap"
exec {NAPFD}<>"$root/.nap"
nap() { read -r -t "$1" -u "$NAPFD" _ || :; }

# T is set to the wall clock in microseconds, without forking.
stamp() { T=${EPOCHREALTIME/./}; }
# cpu: C = CPU time (user + sys, µs) of this shell's waited-for children so
# far, their own waited-for children included (a tool's runs, cq's
# supervisor). times must run in this shell, not a subshell: a subshell
# starts its children's count at zero.
cpu() {
	times >"$root/times.txt"
	C=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%.0f", t * 1e6 }' "$root/times.txt")
}

# --- peers -------------------------------------------------------------------

apt_updated=0
apt_install() { # PKG: install one Debian package, apt-get update only on failure
	local pkg=$1 log=$root/apt-$1.log sudo=()
	[[ ${NO_INSTALL:-0} == 1 ]] && return 1
	command -v apt-get >/dev/null || return 1
	if [[ $(id -u) -ne 0 ]]; then
		if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			say "cannot install $pkg: not root and no password-less sudo"
			return 1
		fi
	fi
	apt() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >>"$log" 2>&1; }
	say "installing $pkg (apt-get install -y --no-install-recommends $pkg)"
	apt install -y --no-install-recommends "$pkg" && return 0
	if [[ $apt_updated == 0 ]]; then
		apt_updated=1
		apt update && apt install -y --no-install-recommends "$pkg" && return 0
	fi
	say "apt-get could not install $pkg; the end of its output:"
	tail -n 3 "$log" | sed 's/^/  /'
	return 1
}

find_tsp() { # Debian's task-spooler installs tsp; elsewhere it may be ts (moreutils has another ts)
	if command -v tsp >/dev/null; then
		TSP=$(command -v tsp)
	elif command -v ts >/dev/null && timeout 5 ts -V </dev/null 2>&1 | grep -qi 'task spooler'; then
		TSP=$(command -v ts)
	else
		return 1
	fi
}
is_gnu_parallel() { timeout 10 parallel --version </dev/null 2>/dev/null | grep -q 'GNU parallel'; }

TSP='' PARALLEL='' NQ=''
find_tsp || { apt_install task-spooler && find_tsp; } || say "task-spooler (tsp) is not installed and could not be: its rows are left out"
if is_gnu_parallel || { apt_install parallel && is_gnu_parallel; }; then
	PARALLEL=$(command -v parallel)
else
	say "GNU parallel is not installed and could not be: its row is left out"
fi
if command -v nq >/dev/null || apt_install nq; then
	NQ=$(command -v nq) || say "nq is not installed and could not be: its rows are left out"
else
	say "nq is not installed and could not be: its rows are left out"
fi

for p in ${SKIP:-}; do
	case $p in
	tsp) TSP='' ;;
	parallel) PARALLEL='' ;;
	nq) NQ='' ;;
	*) die "SKIP: unknown peer '$p' (tsp, parallel, nq)" ;;
	esac
	say "$p left out (SKIP)"
done

# The peers must not pick up a user's settings.
unset TS_SAVELIST TS_ONFINISH TS_ENV TS_MAILTO TS_SLOTS TS_MAXCONN TS_MAXFINISHED TS_SOCKET NQDIR CQ_DB CQ_HANDLERS

# tspq DIR ARGS…: tsp on a private socket, output files and finished list in DIR.
tspq() {
	TS_SOCKET=$1/socket TMPDIR=$1 TS_MAXFINISHED=$((WAL_N + N + CALLS + 1000)) "$TSP" "${@:2}"
}

# --- statistics ----------------------------------------------------------------

# stats VALUES…: prints "median min max p90 p99" (nearest rank); each
# argument may hold several blank-separated values.
stats() {
	printf '%s\n' "$@" | tr -s ' \t' '\n' | sort -g | awk '
		NF { v[++n] = $1 }
		function rank(p,  i) { i = int(p * n / 100); if (i < p * n / 100) i++; if (i < 1) i = 1; return v[i] }
		END {
			if (n == 0) { print "nan nan nan nan nan"; exit }
			med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			printf "%.6g %.6g %.6g %.6g %.6g\n", med, v[1], v[n], rank(90), rank(99)
		}'
}

# --- the throughput runs ---------------------------------------------------------
#
# Each run_TOOL DIR does its untimed setup, sets T0 and T1 (µs) around the timed
# part, checks that all N tasks ran and succeeded, and returns non-zero if not.

# set_tasks COUNT: the task count the run_TOOL functions use (N, SEQ, BATCH).
set_tasks() {
	N=$1
	mapfile -t SEQ < <(seq "$N")
	BATCH=$root/batch.$N.jsonl
	[[ -s $BATCH ]] || yes '{"cmd":["true"]}' | head -n "$N" >"$BATCH"
}

run_xargs() {
	cpu; C0=$C
	stamp; T0=$T
	printf '%s\n' "${SEQ[@]}" | xargs -P"$CONC" -n1 true
	local rc=$?
	stamp; T1=$T
	cpu; C1=$C
	return "$rc"
}

run_spawnref() {
	cpu; C0=$C
	stamp; T0=$T
	"$SPAWNREF" -n "$N" -c "$CONC"
	local rc=$?
	stamp; T1=$T
	cpu; C1=$C
	return "$rc"
}

run_cq() {
	local d=$1 ndone
	CQ_HOME=$d/home "$CQ" enqueue --batch -f "$BATCH" >/dev/null || return 1
	cpu; C0=$C
	stamp; T0=$T
	CQ_HOME=$d/home "$CQ" worker --once --concurrency "$CONC" 2>"$d/worker.log"
	local rc=$?
	stamp; T1=$T
	cpu; C1=$C
	ndone=$(CQ_HOME=$d/home "$CQ" ls --state "done" --limit 0 -q | wc -l)
	if [[ $rc != 0 || $ndone != "$N" ]]; then
		warn "cq run in $d: worker exit $rc, $ndone of $N tasks done"
		return 1
	fi
}

run_tsp() {
	local d=$1 i fin deadline
	tspq "$d" -S "$CONC" || return 1 # starts this run's server, untimed
	stamp; T0=$T
	for ((i = 0; i < N; i++)); do
		tspq "$d" true >/dev/null
	done
	tspq "$d" -w >/dev/null # the last job added
	# With several slots the last job may end before earlier ones: wait for all.
	deadline=$((T0 + 120000000))
	while :; do
		fin=$(tspq "$d" -l | awk 'NR > 1 && $2 == "finished"' | wc -l)
		[[ $fin -ge $N ]] && break
		stamp
		((T > deadline)) && break
		nap 0.005
	done
	stamp; T1=$T
	local ok
	ok=$(tspq "$d" -l | awk 'NR > 1 && $2 == "finished" && $4 == "0"' | wc -l)
	tspq "$d" -K 2>/dev/null
	if [[ $ok != "$N" ]]; then
		warn "tsp run in $d: $ok of $N jobs listed as finished with exit 0"
		return 1
	fi
}

run_parallel() {
	local d=$1
	stamp; T0=$T
	TMPDIR=$d "$PARALLEL" --will-cite -j"$CONC" true ::: "${SEQ[@]}"
	local rc=$?
	stamp; T1=$T
	return "$rc"
}

# nq runs one job at a time per NQDIR, so CONC queues are fed round-robin.
run_nq() {
	local d=$1 i q ok
	for ((q = 0; q < CONC; q++)); do mkdir -p "$d/q$q"; done
	stamp; T0=$T
	for ((i = 0; i < N; i++)); do
		NQDIR=$d/q$((i % CONC)) "$NQ" -q true
	done
	for ((q = 0; q < CONC; q++)); do
		NQDIR=$d/q$q "$NQ" -w
	done
	stamp; T1=$T
	ok=$(grep -rlF '[exited with status 0.]' "$d" | wc -l)
	if [[ $ok != "$N" ]]; then
		warn "nq run in $d: $ok of $N job files say 'exited with status 0'"
		return 1
	fi
}

# The end-to-end floor (bench/floor/run.go): only the work cq's contract
# requires of each task, so no tool keeping the contract can beat it here.
run_floor() {
	local d=$1 ran rc
	"$FLOOR" backlog "$d" "$N" || return 1
	cpu; C0=$C
	stamp; T0=$T
	ran=$("$FLOOR" run "$d" 2>"$d/floor.log")
	rc=$?
	stamp; T1=$T
	cpu; C1=$C
	if [[ $rc != 0 || $ran != "$N" ]]; then
		warn "floor run in $d: exit $rc, ran ${ran:-none} of $N tasks"
		return 1
	fi
}

tools=(xargs spawnref cq floor)
[[ -n $TSP ]] && tools+=(tsp)
[[ -n $PARALLEL ]] && tools+=(parallel)
[[ -n $NQ ]] && tools+=(nq)
declare -A label=(
	[xargs]="xargs -P$CONC"
	[spawnref]="Go spawn reference"
	[cq]="cq worker -c $CONC"
	[floor]="floor (contract only)"
	[tsp]="tsp -S $CONC"
	[parallel]="GNU parallel -j$CONC"
	[nq]="nq ($CONC NQDIRs)"
)
declare -A rates=() fails=() cpus=() cpu_med=()

# One untimed round of a few tasks each first, so that no tool pays for cold
# caches (its binary, perl modules, the first store) in round 1.
say "warming up: $WARMUP_N tasks per tool, untimed …"
set_tasks "$WARMUP_N"
for t in "${tools[@]}"; do
	mkdir -p "$root/warm/$t"
	"run_$t" "$root/warm/$t" >"$root/warm/$t.out" 2>&1 || warn "$t failed its warm-up; its output: $root/warm/$t.out"
	nap 0.3
done
set_tasks "$TASKS"

say "measuring throughput: $N × true, $CONC at a time, $RUNS rounds, tools interleaved (tasks/s) …"
for ((r = 0; r < RUNS; r++)); do
	line="round $((r + 1)):"
	for ((k = 0; k < ${#tools[@]}; k++)); do
		t=${tools[$(((r + k) % ${#tools[@]}))]} # rotate the order every round
		d=$root/tp/$t.$r
		mkdir -p "$d"
		C0= C1=
		if "run_$t" "$d" >"$d.out" 2>&1; then
			rate=$(awk -v n="$N" -v us=$((T1 - T0)) 'BEGIN { printf "%.1f", n * 1e6 / us }')
			rates[$t]+=" $rate"
			[[ -n $C0 && -n $C1 ]] && cpus[$t]+=" $(((C1 - C0) / N))"
			line+=" $t=$rate"
		else
			fails[$t]=$((${fails[$t]:-0} + 1))
			line+=" $t=FAILED"
			warn "$t failed in round $((r + 1)); its output: $d.out"
		fi
		nap 0.3 # let the previous tool's stray processes go
	done
	say "$line"
done

# --- enqueue call cost ----------------------------------------------------------

say "measuring one enqueue call: $CALLS calls per tool, interleaved …"
cd_=$root/calls
mkdir -p "$cd_/tsp" "$cd_/nq"
CQ_HOME=$cd_/cq "$CQ" enqueue -- true >/dev/null || die "cq enqueue failed"        # creates the store
CQ_HOME=$cd_/cqspool "$CQ" enqueue -- true >/dev/null || die "cq enqueue failed"   # creates the home
[[ -n $TSP ]] && tspq "$cd_/tsp" true >/dev/null                                   # starts the server
"$FLOOR" insert "$cd_/floor.db" || die "bench/floor insert failed"
declare -A calls=()
for ((i = 0; i < CALLS; i++)); do
	stamp; a=$T
	CQ_HOME=$cd_/cq "$CQ" enqueue -- true >/dev/null
	stamp; calls[cq]+=" $((T - a))"
	# The floor: a binary linking what cq links that commits one row to
	# a WAL database.
	stamp; a=$T
	"$FLOOR" insert "$cd_/floor.db"
	stamp; calls[floorinsert]+=" $((T - a))"
	stamp; a=$T
	CQ_HOME=$cd_/cqspool "$CQ" enqueue --spool -- true >/dev/null
	stamp; calls[cqspool]+=" $((T - a))"
	if [[ -n $TSP ]]; then
		stamp; a=$T
		tspq "$cd_/tsp" true >/dev/null
		stamp; calls[tsp]+=" $((T - a))"
	fi
	if [[ -n $NQ ]]; then
		stamp; a=$T
		NQDIR=$cd_/nq "$NQ" -q true
		stamp; calls[nq]+=" $((T - a))"
	fi
done
[[ -n $TSP ]] && tspq "$cd_/tsp" -K 2>/dev/null

# --- per-run files ----------------------------------------------------------------
#
# What the worker's per-run folder costs on this file system, alone: mkdir
# and three file creations (the runs/<run_id>/ layout of docs/semantics.md), in the
# folder the cq homes live in.

say "measuring per-run folders: $N of them …"
mkdir -p "$root/files"
files_us=$("$FLOOR" files "$root/files" "$N") || files_us=nan

# --- enqueue → start latency on an idle worker --------------------------------------

say "measuring enqueue→start on an idle cq worker: $LAT_SAMPLES samples …"
ld=$root/lat
mkdir -p "$ld/stamps"
CQ_HOME=$ld/home "$CQ" worker 2>"$ld/worker.log" &
wpid=$!
bg_pids+=("$wpid")
# The stamp command: /bin/sh starts date, which writes the wall clock in µs.
# stampcmd sets cmd without a fork, before the clock starts: a command
# substitution would add a fork of bash to every sample.
stampcmd() { printf -v cmd 'date +%%s%%6N > %q' "$ld/stamps/$1"; }
stampcmd warmup
CQ_HOME=$ld/home "$CQ" enqueue --shell "$cmd" >"$ld/id" || die "cq enqueue failed"
read -r id <"$ld/id"
CQ_HOME=$ld/home "$CQ" wait "$id" --timeout 30s >/dev/null || die "the latency worker ran nothing in 30 s (see $ld/worker.log)"
lat_call=() lat_commit=() lat_lost=0
for ((i = 0; i < LAT_SAMPLES; i++)); do
	nap 0.05 # the worker is idle again (waiting on inotify)
	f=$ld/stamps/$i
	stampcmd "$i"
	stamp; a=$T
	CQ_HOME=$ld/home "$CQ" enqueue --shell "$cmd" >"$ld/id"
	stamp; b=$T
	read -r id <"$ld/id"
	deadline=$((b + 10000000))
	while [[ ! -s $f ]]; do
		stamp
		((T > deadline)) && break
		nap 0.001
	done
	if [[ -s $f ]]; then
		read -r s <"$f"
		lat_call+=("$((s - a))")
		lat_commit+=("$((s - b))")
	else
		lat_lost=$((lat_lost + 1))
	fi
	CQ_HOME=$ld/home "$CQ" wait "$id" --timeout 10s >/dev/null
done
kill -TERM "$wpid" 2>/dev/null
wait "$wpid" 2>/dev/null
bg_pids=()
# What the stamp command itself costs when bash starts it (for reading the above).
stampref=()
for ((i = 0; i < 50; i++)); do
	stampcmd ref
	stamp; a=$T
	sh -c "$cmd"
	read -r s <"$ld/stamps/ref"
	stampref+=("$((s - a))")
done

# --- worker RSS at concurrency RSS_CONC --------------------------------------------

say "measuring cq worker RSS at --concurrency $RSS_CONC with $RSS_CONC × sleep 1 …"
rd=$root/rss
mkdir -p "$rd"
for ((i = 0; i < RSS_CONC; i++)); do printf '{"cmd":["sleep","1"]}\n'; done >"$rd/batch.jsonl"
CQ_HOME=$rd/home "$CQ" enqueue --batch -f "$rd/batch.jsonl" >/dev/null || die "cq enqueue --batch failed"
CQ_HOME=$rd/home "$CQ" worker --once --concurrency "$RSS_CONC" 2>"$rd/worker.log" &
wpid=$!
bg_pids+=("$wpid")
rss_kb() { # PID: VmRSS in kB, 0 if gone
	local k v _u
	while read -r k v _u; do
		[[ $k == VmRSS: ]] && { printf '%s' "$v"; return; }
	done <"/proc/$1/status" 2>/dev/null
	printf 0
}
rss_max=0 rss_w=0 rss_s=0 rss_all=0 rss_maxtasks=0
while kill -0 "$wpid" 2>/dev/null; do
	w=$(rss_kb "$wpid") s=0 tasks=0
	read -r -a kids <<<"$(cat /proc/"$wpid"/task/*/children 2>/dev/null)"
	for c in "${kids[@]}"; do
		# The helper is the worker's own binary re-run as "cq __supervisor"
		# (its comm is the binary's file name); every other child is a task.
		argv=()
		{ mapfile -d '' -t argv <"/proc/$c/cmdline"; } 2>/dev/null
		if [[ ${argv[1]:-} == __supervisor ]]; then
			s=$((s + $(rss_kb "$c")))
		elif ((${#argv[@]} > 0)); then
			tasks=$((tasks + 1))
		fi
	done
	((tasks > rss_maxtasks)) && rss_maxtasks=$tasks
	# The figure is the peak while all RSS_CONC tasks run; the overall peak
	# (start-up and wind-down included) is kept beside it.
	((w + s > rss_all)) && rss_all=$((w + s))
	if ((tasks == RSS_CONC && w + s > rss_max)); then rss_max=$((w + s)) rss_w=$w rss_s=$s; fi
	nap 0.05
done
wait "$wpid" 2>/dev/null
bg_pids=()

# --- WAL size during a big run -------------------------------------------------------

wal_n=$WAL_N wal_note=''
read -r cq_med _ < <(stats "${rates[cq]:-}")
if [[ $cq_med != nan ]]; then
	est=$(awk -v n="$WAL_N" -v r="$cq_med" 'BEGIN { printf "%d", n / r }')
	if ((est > WAL_MAX_SECONDS)); then
		wal_n=$(awk -v r="$cq_med" -v s="$WAL_MAX_SECONDS" 'BEGIN { n = int(r * s * 0.9 / 1000) * 1000; print (n < 1000 ? 1000 : n) }')
		wal_note="(reduced from $WAL_N: at ${cq_med}/s that run would take ~${est} s, over WAL_MAX_SECONDS=$WAL_MAX_SECONDS)"
	fi
fi
say "measuring cq.db-wal every 50 ms during a $wal_n-task run (worker --once -c $CONC)${wal_note:+ $wal_note} …"
wd=$root/wal
mkdir -p "$wd"
yes '{"cmd":["true"]}' | head -n "$wal_n" >"$wd/batch.jsonl"
walsize() { stat -c %s "$wd/home/cq.db-wal" 2>/dev/null || echo 0; }
# The batch is one transaction: its WAL peaks at the commit, and the
# command truncates the WAL on its way out (see the README), so the size
# is sampled while it runs, every 10 ms.
wal_enq_max=0
stamp; a=$T
CQ_HOME=$wd/home "$CQ" enqueue --batch -f "$wd/batch.jsonl" >/dev/null &
epid=$!
bg_pids+=("$epid")
while kill -0 "$epid" 2>/dev/null; do
	sz=$(walsize)
	((sz > wal_enq_max)) && wal_enq_max=$sz
	nap 0.01
done
wait "$epid" || die "cq enqueue --batch of $wal_n failed"
stamp; wal_enq_us=$((T - a))
bg_pids=()
wal_start=$(walsize) wal_max=0 wal_cut=0
((wal_start > wal_enq_max)) && wal_enq_max=$wal_start
stamp; a=$T
CQ_HOME=$wd/home "$CQ" worker --once --concurrency "$CONC" 2>"$wd/worker.log" &
wpid=$!
bg_pids+=("$wpid")
deadline=$((a + WAL_MAX_SECONDS * 1000000))
while kill -0 "$wpid" 2>/dev/null; do
	sz=$(walsize)
	((sz > wal_max)) && wal_max=$sz
	stamp
	if ((T > deadline)) && ((wal_cut == 0)); then
		wal_cut=1
		kill -TERM "$wpid" 2>/dev/null
	fi
	nap 0.05
done
wait "$wpid" 2>/dev/null
bg_pids=()
stamp; wal_run_us=$((T - a))
wal_end=$(walsize)
db_end=$(stat -c %s "$wd/home/cq.db" 2>/dev/null || echo 0)
wal_done=$(CQ_HOME=$wd/home "$CQ" ls --state "done" --limit 0 -q | wc -l)

# --- report ----------------------------------------------------------------------------

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
ms() { awk -v u="$1" 'BEGIN { printf "%.2f", u / 1000 }'; }

declare -A med=()
for t in "${tools[@]}"; do
	read -r m _ < <(stats "${rates[$t]:-}")
	med[$t]=$m
done

say ""
say "================================================================================"
say "cq end-to-end benchmark — $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine: $(nproc) cores, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r)$([[ -r /etc/debian_version ]] && printf ', Debian %s' "$(cat /etc/debian_version)")"
say "cq: $CQ (modified $(date -u -r "$CQ" '+%Y-%m-%d %H:%M UTC'), sha256 $(sha256sum "$CQ" | cut -c1-12)); repo at $repo_rev when the run began"
peers=()
[[ -n $TSP ]] && peers+=("$("$TSP" -V 2>&1 | head -n1 | sed 's/ - .*//') ($TSP)")
[[ -n $PARALLEL ]] && peers+=("$("$PARALLEL" --version </dev/null 2>/dev/null | head -n1)")
[[ -n $NQ ]] && peers+=("nq $(dpkg-query -W -f '${Version}' nq 2>/dev/null || echo '(version unknown)')")
say "peers: $(IFS=';'; printf '%s' "${peers[*]:-none}" | sed 's/;/; /g'); $(xargs --version | head -n1)"
say "scratch: $root ($(df -P "$root" | awk 'NR == 2 { print $1 }'))"
say ""
say "throughput: $N × true, $CONC at a time, median of $RUNS interleaved rounds"
printf '%-22s %12s %19s %12s %8s\n' "tool" "tasks/s" "min–max" "÷ spawnref" "÷ tsp"
for t in "${tools[@]}"; do
	if [[ -z ${rates[$t]:-} ]]; then
		printf '%-22s %12s   (all %s runs failed)\n' "${label[$t]}" "-" "$RUNS"
		continue
	fi
	read -r m lo hi _ < <(stats "${rates[$t]}")
	r_ref=$(awk -v a="$m" -v b="${med[spawnref]}" 'BEGIN { if (b == "nan" || b == 0) print "n/a"; else printf "%.2f", a / b }')
	r_tsp=n/a
	[[ -n ${med[tsp]:-} ]] && r_tsp=$(awk -v a="$m" -v b="${med[tsp]}" 'BEGIN { if (b == "nan" || b == 0) print "n/a"; else printf "%.2f", a / b }')
	extra=''
	[[ -n ${fails[$t]:-} ]] && extra="  (${fails[$t]} failed runs left out)"
	printf '%-22s %12.0f %19s %12s %8s%s\n' "${label[$t]}" "$m" "$(printf '%.0f–%.0f' "$lo" "$hi")" "$r_ref" "$r_tsp" "$extra"
done
for t in xargs spawnref cq floor tsp parallel nq; do
	[[ " ${tools[*]} " == *" $t "* ]] || printf '%-22s %12s   (not installed)\n' "${label[$t]}" "-"
done
cpu_line="CPU per task (µs, user + sys of the tool and every process it waited for; median):"
for t in xargs spawnref cq floor; do
	[[ -n ${cpus[$t]:-} ]] || continue
	read -r m _ < <(stats "${cpus[$t]}")
	cpu_med[$t]=$m
	cpu_line+=" $t $m"
done
say "$cpu_line"

say ""
say "one enqueue call (ms, wall time of the command from bash; $CALLS each):"
printf '%-30s %8s %8s %8s\n' "call" "median" "p90" "max"
for k in cq cqspool tsp nq floorinsert; do
	[[ -n ${calls[$k]:-} ]] || continue
	case $k in
	floorinsert) name="floor: one WAL insert" ;;
	cq) name="cq enqueue -- true" ;;
	cqspool) name="cq enqueue --spool -- true" ;;
	tsp) name="tsp true" ;;
	nq) name="nq true" ;;
	esac
	read -r m _ hi p90 _ < <(stats "${calls[$k]}")
	printf '%-30s %8s %8s %8s\n' "$name" "$(ms "$m")" "$(ms "$p90")" "$(ms "$hi")"
done

say ""
say "per-run folder on this file system (mkdir + stdout.log + stderr.log + summary.json, $N in a row): $files_us µs each"

say ""
say "enqueue→start on an idle cq worker (ms; ${#lat_call[@]} samples${lat_lost:+, $lat_lost lost}):"
if ((${#lat_call[@]} > 0)); then
	read -r m lo hi p90 p99 < <(stats "${lat_call[@]}")
	printf '  from the enqueue call:    p50 %s  p90 %s  p99 %s  max %s\n' "$(ms "$m")" "$(ms "$p90")" "$(ms "$p99")" "$(ms "$hi")"
	read -r m lo hi p90 p99 < <(stats "${lat_commit[@]}")
	printf '  from its return (commit): p50 %s  p90 %s  p99 %s  max %s\n' "$(ms "$m")" "$(ms "$p90")" "$(ms "$p99")" "$(ms "$hi")"
	read -r m _ < <(stats "${stampref[@]}")
	printf '  (includes starting the stamp command sh -c date: %s ms median when bash starts it)\n' "$(ms "$m")"
fi

say ""
say "worker RSS at --concurrency $RSS_CONC (VmRSS of the worker + its cq __supervisor, every 50 ms):"
if ((rss_max > 0)); then
	printf '  %s peak while all %s sleeps ran (worker %s + supervisor %s); %s peak over the whole run\n' \
		"$(mib $((rss_max * 1024)))" "$RSS_CONC" "$(mib $((rss_w * 1024)))" "$(mib $((rss_s * 1024)))" "$(mib $((rss_all * 1024)))"
	((rss_s == 0)) && say "  (no cq __supervisor child was seen: the figure is the worker's alone)"
else
	printf '  never saw all %s sleeps running at once (at most %s); %s peak over the whole run\n' "$RSS_CONC" "$rss_maxtasks" "$(mib $((rss_all * 1024)))"
fi

say ""
say "WAL during a $wal_n-task run${wal_note:+ $wal_note}:"
printf '  cq.db-wal: peak %s during the batch enqueue, %s after it, peak %s during the run, %s at the end (cq.db %s)\n' \
	"$(mib "$wal_enq_max")" "$(mib "$wal_start")" "$(mib "$wal_max")" "$(mib "$wal_end")" "$(mib "$db_end")"
printf '  batch enqueue %s tasks/s; the worker ran %s of %s in %.1f s (%.0f tasks/s)%s\n' \
	"$(awk -v n="$wal_n" -v us="$wal_enq_us" 'BEGIN { printf "%.0f", n * 1e6 / us }')" \
	"$wal_done" "$wal_n" "$(awk -v us="$wal_run_us" 'BEGIN { print us / 1e6 }')" \
	"$(awk -v n="$wal_done" -v us="$wal_run_us" 'BEGIN { print n * 1e6 / us }')" \
	"$([[ $wal_cut == 1 ]] && printf ' — stopped at WAL_MAX_SECONDS=%s' "$WAL_MAX_SECONDS")"

# --- machine-readable figures (RESULTS=FILE) ----------------------------------------
#
# key=value lines, one figure each, for bench/goals.sh: rates in tasks/s,
# times in µs, sizes in bytes or kB as the key says; "nan" when not measured.

if [[ -n ${RESULTS:-} ]]; then
	mkdir -p "$(dirname "$RESULTS")"
	{
		printf 'e2e_tasks=%s\ne2e_runs=%s\ne2e_conc=%s\n' "$N" "$RUNS" "$CONC"
		for t in xargs spawnref cq floor tsp parallel nq; do
			if [[ -n ${rates[$t]:-} ]]; then
				read -r m lo hi _ < <(stats "${rates[$t]}")
			else
				m=nan lo=nan hi=nan
			fi
			printf 'tp_%s=%s\ntp_%s_min=%s\ntp_%s_max=%s\n' "$t" "$m" "$t" "$lo" "$t" "$hi"
		done
		printf 'files_per_run_us=%s\ncores=%s\n' "$files_us" "$(nproc)"
		for t in xargs spawnref cq floor; do
			printf 'cpu_%s_us=%s\n' "$t" "${cpu_med[$t]:-nan}"
		done
		for k in cq cqspool tsp nq floorinsert; do
			m=nan p90=nan
			[[ -n ${calls[$k]:-} ]] && read -r m _ _ p90 _ < <(stats "${calls[$k]}")
			printf 'call_%s_us=%s\ncall_%s_p90_us=%s\n' "$k" "$m" "$k" "$p90"
		done
		printf 'lat_samples=%s\nlat_lost=%s\n' "${#lat_call[@]}" "$lat_lost"
		m=nan p99=nan
		((${#lat_call[@]} > 0)) && read -r m _ _ _ p99 < <(stats "${lat_call[@]}")
		printf 'lat_call_p50_us=%s\nlat_call_p99_us=%s\n' "$m" "$p99"
		m=nan p99=nan
		((${#lat_commit[@]} > 0)) && read -r m _ _ _ p99 < <(stats "${lat_commit[@]}")
		printf 'lat_commit_p50_us=%s\nlat_commit_p99_us=%s\n' "$m" "$p99"
		read -r m _ < <(stats "${stampref[@]}")
		printf 'lat_stampcmd_us=%s\n' "$m"
		m=nan
		((rss_max > 0)) && m=$rss_max
		printf 'rss_conc=%s\nrss_kb=%s\nrss_worker_kb=%s\nrss_supervisor_kb=%s\nrss_all_kb=%s\nrss_maxtasks=%s\n' \
			"$RSS_CONC" "$m" "$rss_w" "$rss_s" "$rss_all" "$rss_maxtasks"
		printf 'wal_requested_tasks=%s\nwal_tasks=%s\nwal_done=%s\nwal_cut=%s\n' "$WAL_N" "$wal_n" "$wal_done" "$wal_cut"
		printf 'wal_after_enqueue_bytes=%s\nwal_peak_run_bytes=%s\nwal_end_bytes=%s\ndb_end_bytes=%s\n' "$wal_start" "$wal_max" "$wal_end" "$db_end"
		printf 'wal_enqueue_peak_bytes=%s\n' "$wal_enq_max"
		printf 'wal_peak_bytes=%s\n' "$((wal_enq_max > wal_max ? wal_enq_max : wal_max))"
		printf 'batch_cli_tasks_per_s=%s\n' "$(awk -v n="$wal_n" -v us="$wal_enq_us" 'BEGIN { printf "%.0f", n * 1e6 / us }')"
		printf 'wal_worker_tasks_per_s=%s\n' "$(awk -v n="$wal_done" -v us="$wal_run_us" 'BEGIN { printf "%.0f", n * 1e6 / us }')"
	} >"$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
fi

stamp
say ""
say "measuring took $(awk -v us=$((T - ${script_start/./})) 'BEGIN { printf "%.0f", us / 1e6 }') s; reproduce with:"
say "  ${SKIP:+SKIP=\"$SKIP\" }RUNS=$RUNS N=$N WARMUP_N=$WARMUP_N CALLS=$CALLS LAT_SAMPLES=$LAT_SAMPLES RSS_CONC=$RSS_CONC WAL_N=$WAL_N WAL_MAX_SECONDS=$WAL_MAX_SECONDS bench/e2e.sh${cq_shown:+ $cq_shown}"
say "================================================================================"
exit 0
}
