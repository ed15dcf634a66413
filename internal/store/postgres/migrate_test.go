package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/postgres/pgtest"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"github.com/jackc/pgx/v5"
)

var ctx = context.Background()

// testMigrations are the embedded migrations and two of the tests' own
// after them: the first waits a little, so that concurrent openers
// overlap, and makes a table; the second adds a column to it.
func testMigrations() []postgres.Migration {
	ms := slices.Clone(postgres.Migrations())
	n := len(ms)
	return append(ms,
		postgres.Migration{Version: n + 1, SQL: `SELECT pg_sleep(0.05); CREATE TABLE extra (a integer)`},
		postgres.Migration{Version: n + 2, SQL: `ALTER TABLE extra ADD COLUMN b text`})
}

// openTest opens url with migrations ms, failing t when it cannot, and
// returns the store (closed at the end of t) and how many migrations
// the open applied.
func openTest(t *testing.T, url string, ms []postgres.Migration) (*postgres.DB, int) {
	t.Helper()
	d, n, err := tryOpen(url, ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, n
}

// tryClose closes a store openTest opened before t ends.
func tryClose(d *postgres.DB, _ int) { _ = d.Close() }

func tryOpen(url string, ms []postgres.Migration) (*postgres.DB, int, error) {
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		return nil, 0, err
	}
	return postgres.OpenWith(ctx, cfg, ms)
}

// newURL is a URL selecting a schema of its own that does not exist yet
// (dropped at the end of t).
func newURL(t *testing.T) string {
	t.Helper()
	return pgtest.URLFor(t, pgtest.Server(t), pgtest.NewName())
}

func version(t *testing.T, url string) int {
	t.Helper()
	v, err := postgres.SchemaVersion(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func contents(t *testing.T, url string) string {
	t.Helper()
	s, err := pgtest.Contents(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// versionRows lists the versions recorded in d's version table.
func versionRows(t *testing.T, d *postgres.DB) []int {
	t.Helper()
	rows, err := d.Pool.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestOpenCreatesSchema: a schema that does not exist is created and
// migrated to the latest version, with cq's tables, and the sessions
// carry cq's settings; opening it again applies nothing.
func TestOpenCreatesSchema(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	d, n := openTest(t, url, postgres.Migrations())
	if n != postgres.LatestVersion() || version(t, url) != postgres.LatestVersion() {
		t.Fatalf("applied %d migrations, version %d; want %d", n, version(t, url), postgres.LatestVersion())
	}
	if vs := versionRows(t, d); len(vs) != postgres.LatestVersion() || vs[len(vs)-1] != postgres.LatestVersion() {
		t.Errorf("version rows %v", vs)
	}
	rows, err := d.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, d.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "[asks event_seq events messages queues run_output run_progress runs schedules schema_migrations system_state task_deps tasks workers]"; fmt.Sprint(tables) != want {
		t.Errorf("tables %v, want %s", tables, want)
	}
	var last int64
	if err := d.Pool.QueryRow(ctx, `SELECT last FROM event_seq`).Scan(&last); err != nil || last != 0 {
		t.Errorf("event_seq: %d, %v", last, err)
	}

	settings := map[string]string{
		"search_path":                         `"` + d.Schema + `"`,
		"statement_timeout":                   "1min",
		"idle_in_transaction_session_timeout": "30s",
		"TimeZone":                            "UTC",
		"application_name":                    "cq",
	}
	var major int
	if err := d.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&major); err != nil {
		t.Fatal(err)
	}
	if major >= 14 {
		settings["client_connection_check_interval"] = "2s"
	}
	for k, want := range settings {
		var got string
		if err := d.Pool.QueryRow(ctx, `SELECT current_setting($1)`, k).Scan(&got); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", k, got, err, want)
		}
	}

	if _, n := openTest(t, url, postgres.Migrations()); n != 0 {
		t.Errorf("a second open applied %d migrations", n)
	}
}

// TestSchemaMatchesSQLite: every table of the SQLite schema is in the
// PostgreSQL one with the same column names; PostgreSQL's may have more
// (what a shared server needs besides).
func TestSchemaMatchesSQLite(t *testing.T) {
	t.Parallel()
	d, _ := openTest(t, newURL(t), postgres.Migrations())
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cq.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	tables, err := lite.SQL.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tables.Next() {
		var name string
		if err := tables.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := tables.Close(); err != nil || len(names) < 7 {
		t.Fatalf("SQLite's tables: %v, %v", names, err)
	}
	for _, table := range names {
		var liteCols []string
		cols, err := lite.SQL.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY name`, table)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var c string
			if err := cols.Scan(&c); err != nil {
				t.Fatal(err)
			}
			liteCols = append(liteCols, c)
		}
		_ = cols.Close()
		rows, err := d.Pool.Query(ctx, `SELECT column_name::text FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = $2 ORDER BY 1`, d.Schema, table)
		if err != nil {
			t.Fatal(err)
		}
		pgCols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range liteCols {
			if !slices.Contains(pgCols, c) {
				t.Errorf("%s.%s is in SQLite's schema, not in PostgreSQL's (%v)", table, c, pgCols)
			}
		}
	}
}

// TestOpenEmptySchema: a schema made for cq, empty, is migrated.
func TestOpenEmptySchema(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	if _, n := openTest(t, url, postgres.Migrations()); n != postgres.LatestVersion() {
		t.Errorf("applied %d migrations, want %d", n, postgres.LatestVersion())
	}
}

// TestOpenConcurrent: openers of one new schema at once, in goroutines,
// all succeed, and each migration is applied once.
func TestOpenConcurrent(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	ms := testMigrations()
	const openers = 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	applied := make([]int, openers)
	errs := make([]error, openers)
	for i := range openers {
		wg.Go(func() {
			<-start
			var d *postgres.DB
			d, applied[i], errs[i] = tryOpen(url, ms)
			if d != nil {
				_ = d.Close()
			}
		})
	}
	close(start)
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
		total += applied[i]
	}
	if total != len(ms) || version(t, url) != len(ms) {
		t.Errorf("applied %d migrations in all (%v), version %d; want %d", total, applied, version(t, url), len(ms))
	}
}

// TestOpenConcurrentEmptySchema: openers at once of an empty schema made
// for cq beforehand (as a DBA may, or a test) all succeed, round after
// round: an opener that reads the schema while another's migration
// commits must not take it for another application's.
func TestOpenConcurrentEmptySchema(t *testing.T) {
	t.Parallel()
	const rounds, openers = 20, 8
	for round := range rounds {
		url := pgtest.Schema(t)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, openers)
		for i := range openers {
			wg.Go(func() {
				<-start
				// Spread over the first opener's migration, so that some
				// read the schema while it commits.
				time.Sleep(time.Duration(i) * 15 * time.Millisecond)
				d, _, err := tryOpen(url, postgres.Migrations())
				if d != nil {
					_ = d.Close()
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, opener %d: %v", round, i, err)
			}
		}
	}
}

// envChildURL, set, makes TestOpenConcurrentProcesses a child that opens
// the schema of that URL.
const envChildURL = "CQ_PGTEST_OPEN_URL"

// TestOpenConcurrentProcesses: openers of one new schema at once, in
// several processes (this test binary again), all succeed, and each
// migration is applied once.
func TestOpenConcurrentProcesses(t *testing.T) {
	if url := os.Getenv(envChildURL); url != "" {
		openChild(t, url)
		return
	}
	t.Parallel()
	url := newURL(t)
	ms := testMigrations()
	const procs = 4
	type child struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	children := make([]child, procs)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenConcurrentProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChildURL+"="+url)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		children[i] = child{cmd, in, bufio.NewReader(out)}
	}
	// All start at once: each says it is ready, then waits for go.
	for i, c := range children {
		if line, err := c.out.ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("child %d: %q, %v", i, line, err)
		}
	}
	for _, c := range children {
		_, _ = io.WriteString(c.in, "go\n")
	}
	total := 0
	for i, c := range children {
		rest, _ := io.ReadAll(c.out)
		err := c.cmd.Wait()
		n := -1
		for line := range strings.Lines(string(rest)) {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "applied "); ok {
				n, _ = strconv.Atoi(s)
			}
		}
		if err != nil || n < 0 {
			t.Errorf("child %d: %v; it said %q", i, err, rest)
		}
		total += n
	}
	if total != len(ms) || version(t, url) != len(ms) {
		t.Errorf("applied %d migrations in all, version %d; want %d", total, version(t, url), len(ms))
	}
}

// openChild is a child of TestOpenConcurrentProcesses: it says it is
// ready, waits for go, opens url and says how many migrations it applied.
func openChild(t *testing.T, url string) {
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	d, n, err := tryOpen(url, testMigrations())
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	fmt.Printf("applied %d\n", n)
}

// TestOpenNewerRefused: a schema of a newer version is refused with
// postgres.ErrFutureSchema and left untouched, whether a newer cq's migrations
// made it or its version alone says so; set back, it opens.
func TestOpenNewerRefused(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	ms := testMigrations()
	tryClose(openTest(t, url, ms))
	before := contents(t, url)
	d, err := postgres.Open(ctx, url)
	if !errors.Is(err, store.ErrFutureSchema) || d != nil {
		t.Fatalf("Open of a newer schema: %v, %v; want postgres.ErrFutureSchema", d, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("version %d, this cq knows up to %d", len(ms), postgres.LatestVersion())) {
		t.Errorf("error %q does not give the versions", err)
	}
	if after := contents(t, url); after != before {
		t.Errorf("the refused schema changed:\nbefore %s\nafter  %s", before, after)
	}

	url = newURL(t)
	if err := postgres.MakeAtVersion(ctx, url, postgres.LatestVersion(), "kept", "2020-01-02T03:04:05.000Z"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.SetSchemaVersion(ctx, url, postgres.LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	before = contents(t, url)
	if _, err := postgres.Open(ctx, url); !errors.Is(err, postgres.ErrFutureSchema) {
		t.Fatalf("Open of version %d: %v; want postgres.ErrFutureSchema", postgres.LatestVersion()+1, err)
	}
	if after := contents(t, url); after != before {
		t.Errorf("the refused schema changed:\nbefore %s\nafter  %s", before, after)
	}
	if v := version(t, url); v != postgres.LatestVersion()+1 {
		t.Errorf("version %d after the refusal", v)
	}
	if err := postgres.SetSchemaVersion(ctx, url, postgres.LatestVersion()); err != nil {
		t.Fatal(err)
	}
	if _, n := openTest(t, url, postgres.Migrations()); n != 0 {
		t.Errorf("set back to the latest version, its open applied %d migrations", n)
	}
}

// TestOpenResumes: a schema at an older version gets the migrations above
// it, and only those, keeping what it holds.
func TestOpenResumes(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	ms := testMigrations()
	older := ms[:len(ms)-1]
	d, n := openTest(t, url, older)
	if n != len(older) || version(t, url) != len(older) {
		t.Fatalf("applied %d, version %d; want %d", n, version(t, url), len(older))
	}
	if _, err := d.Pool.Exec(ctx, `INSERT INTO extra (a) VALUES (7)`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, n = openTest(t, url, ms)
	if n != 1 || version(t, url) != len(ms) {
		t.Fatalf("applied %d, version %d; want 1 and %d", n, version(t, url), len(ms))
	}
	var a int
	var b *string
	if err := d.Pool.QueryRow(ctx, `SELECT a, b FROM extra`).Scan(&a, &b); err != nil || a != 7 || b != nil {
		t.Errorf("the kept row: %d, %v, %v", a, b, err)
	}
	if vs := versionRows(t, d); len(vs) != len(ms) {
		t.Errorf("version rows %v", vs)
	}
}

// TestMigrationFails: a migration that fails leaves nothing of itself
// behind, the schema at the version before it, and the lock free: the
// next open goes ahead.
func TestMigrationFails(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	latest := postgres.LatestVersion()
	tryClose(openTest(t, url, postgres.Migrations()))
	before := contents(t, url)
	bad := append(slices.Clone(postgres.Migrations()), postgres.Migration{Version: latest + 1, SQL: `CREATE TABLE half (a integer); SELECT nothing FROM half`})
	_, _, err := tryOpen(url, bad)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("migration %d", latest+1)) {
		t.Fatalf("open with a failing migration: %v", err)
	}
	if after := contents(t, url); after != before {
		t.Errorf("the failed migration left changes:\nbefore %s\nafter  %s", before, after)
	}
	short, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	d, n, err := postgres.OpenWith(short, cfg, testMigrations())
	if err != nil || n != 2 {
		t.Fatalf("the next open: %d applied, %v", n, err)
	}
	d.Close()
}

// TestOpenForeignSchema: a schema holding other objects and no version
// table is another application's: refused with postgres.ErrNotCq, untouched.
func TestOpenForeignSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `CREATE TABLE tasks (id text); INSERT INTO tasks VALUES ('theirs')`)
	c.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := contents(t, url)
	if _, err := postgres.Open(ctx, url); !errors.Is(err, postgres.ErrNotCq) {
		t.Fatalf("Open of another application's schema: %v; want postgres.ErrNotCq", err)
	}
	if after := contents(t, url); after != before {
		t.Errorf("the refused schema changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestMakeAtVersion: MakeAtVersion leaves a schema at the version asked
// for, holding the kept rows, which opens as it is.
func TestMakeAtVersion(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	const at = "2020-01-02T03:04:05.000Z"
	if err := postgres.MakeAtVersion(ctx, url, 1, "kept", at); err != nil {
		t.Fatal(err)
	}
	if v := version(t, url); v != 1 {
		t.Fatalf("version %d", v)
	}
	d, _ := openTest(t, url, postgres.Migrations())
	var state, finished string
	var seq, last int64
	if err := d.Pool.QueryRow(ctx, `SELECT state, finished_at, seq, (SELECT last FROM event_seq) FROM tasks WHERE id = 'kept'`).
		Scan(&state, &finished, &seq, &last); err != nil || state != "done" || finished != at || seq != 2 || last != 2 {
		t.Errorf("kept task: %s %s %d, event_seq %d, %v", state, finished, seq, last, err)
	}
}

// TestOpenNoServer: a server that does not answer is an error that names
// the store, found within the connect timeout, and not a bad URL.
func TestOpenNoServer(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d, err := postgres.Open(ctx, "postgres://x@127.0.0.1:1/x?connect_timeout=3")
	if err == nil || errors.Is(err, postgres.ErrBadURL) || !strings.Contains(err.Error(), "postgres://x@127.0.0.1:1/x?schema=cq") {
		t.Fatalf("Open of a closed port: %v, %v", d, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s", took)
	}
}

// TestOpenFailsOver: of several URLs, the first host that answers and
// accepts writes is used: a dead primary is passed over.
func TestOpenFailsOver(t *testing.T) {
	t.Parallel()
	url := newURL(t)
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.Pool.ConnConfig
	if strings.HasPrefix(cc.Host, "/") {
		t.Skip("the test's server is reached through a Unix socket")
	}
	live, err := postgres.WithHost(url, net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port)))
	if err != nil {
		t.Fatal(err)
	}
	dead, err := postgres.WithHost(url, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	both, err := postgres.ParseURLs([]string{dead, live})
	if err != nil {
		t.Fatal(err)
	}
	d, err := postgres.OpenConfig(ctx, both)
	if err != nil {
		t.Fatalf("open with a dead first host: %v", err)
	}
	defer d.Close()
	var readOnly string
	if err := d.Pool.QueryRow(ctx, `SHOW transaction_read_only`).Scan(&readOnly); err != nil || readOnly != "off" {
		t.Errorf("transaction_read_only %q, %v", readOnly, err)
	}
}
