#!/usr/bin/env bash
# The demo (demo.sh) on PostgreSQL: the same pipeline, its tasks in a
# schema of their own on the server at $1's URL, dropped at the end.
# Usage: demo-pg.sh [path/to/cq] [postgres://URL]
set -euo pipefail
cq=${1:-cq}
base=${2:-${CQ_DEMO_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}}
if ! command -v psql >/dev/null; then
	echo "demo-pg: needs psql (to check the server and drop the demo's schema)" >&2
	exit 1
fi
if ! psql "$base" -Atqc 'SELECT 1' >/dev/null 2>&1; then
	echo "demo-pg: no PostgreSQL server answers at $base; give its URL as the second argument" >&2
	exit 1
fi
schema=cq_demo_$$_$RANDOM
sep='?'
case $base in *\?*) sep='&' ;; esac
drop() { psql "$base" -Atq -c 'SET client_min_messages = warning' -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null || true; }
trap drop EXIT
export CQ_DB="$base${sep}schema=$schema"
printf 'cq on PostgreSQL: CQ_DB=%s\n' "$CQ_DB"
# Not exec: the schema is dropped once the demo ends.
"$(dirname "$0")/demo.sh" "$cq"
