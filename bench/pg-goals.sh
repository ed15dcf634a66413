#!/usr/bin/env bash
# bench/pg-goals.sh GO_BENCH_OUTPUT RIVER_RESULTS — cq on PostgreSQL beside
# River, from one make bench run.
#
# GO_BENCH_OUTPUT is the raw go test -bench output of ./internal/queue
# (its BenchmarkPG* lines; the median over -count runs is used);
# RIVER_RESULTS is the key=value file bench/river writes with -results.
# Prints one line per goal with both figures, their ratio and PASS or
# MISS (n/a when a figure is missing: no server, or a part failed).
# Exits 0 whatever the outcome.
set -uo pipefail
export LC_ALL=C

gofile=${1:?usage: pg-goals.sh GO_BENCH_OUTPUT RIVER_RESULTS}
riverfile=${2:?usage: pg-goals.sh GO_BENCH_OUTPUT RIVER_RESULTS}
[[ -r $gofile ]] || gofile=/dev/null
[[ -r $riverfile ]] || riverfile=/dev/null

awk '
	FILENAME == ARGV[1] && ARGV[1] != ARGV[2] {
		if ($1 !~ /^BenchmarkPG/ || NF < 4) next
		name = $1; sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) { k = name "|" $(i + 1); v[k, ++n[k]] = $i + 0 }
		next
	}
	/^[a-z0-9_]+=/ { i = index($0, "="); f[substr($0, 1, i - 1)] = substr($0, i + 1) }
	END {
		for (k in n) {
			m = n[k]
			for (i = 1; i <= m; i++) a[i] = v[k, i]
			for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
			f[k] = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		}
		print ""
		print "PostgreSQL goals (cq and River on the same server, this run)"
		fmt = "%-44s %-18s %-44s %s\n"
		printf fmt, "goal", "target", "measured", ""
		goal("claim+complete, cq (4 workers x 64 slots)", "BenchmarkPGClaimComplete/workers=4|cycles/s", "river_claim_complete_jobs_per_s", 1.5,
			"BenchmarkPGFloorCycle/workers=4|cycles/s")
		goal("batch enqueue, cq (1000 per transaction)", "BenchmarkPGEnqueueBatch|tasks/s", "river_insert_many_jobs_per_s", 1.0,
			"BenchmarkPGFloorEnqueue|tasks/s")
	}
	# A MISS whose floor (the least the contract of cq writes, as bare SQL on
	# the schema of cq, same run) misses as well says "floor too".
	function goal(g, cqk, rk, want, fk,    r, v) {
		if (!(cqk in f) || !(rk in f) || f[rk] + 0 <= 0) {
			printf fmt, g, ">= " want " x River", "n/a (no figure: server down or a part failed)", "n/a"
			return
		}
		r = f[cqk] / f[rk]
		v = (r >= want) ? "PASS" : "MISS"
		if (v == "MISS" && (fk in f) && f[fk] / f[rk] < want) v = "MISS (floor too)"
		printf fmt, g, ">= " want " x River", sprintf("%.0f/s = %.2f x River %.0f/s", f[cqk], r, f[rk]), v
		if (fk in f) printf fmt, "  its floor (bench_pg_test.go)", "info", sprintf("%.0f/s = %.2f x River", f[fk], f[fk] / f[rk]), ""
	}
' "$gofile" "$riverfile"
exit 0
