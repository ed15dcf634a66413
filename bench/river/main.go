// Command river measures River (github.com/riverqueue/river) on PostgreSQL
// the way River's own `river bench` does, so that cq's PostgreSQL figures
// can be read beside River's from the same machine and server.
//
// It is a module of its own so that River is a dependency of this harness
// only, never of cq. Everything it makes lives in a schema created for the
// run and dropped at its end.
//
//	go run . [-url postgres://…] [-n 100000] [-batch 1000] [-workers 2000] [-json] [-results FILE] [-skip-if-down]
//
// The job table is emptied (TRUNCATE and VACUUM FULL, as River's bench
// resets it) before each of the two insert measures:
//
//   - batch insert: n jobs through Client.InsertMany, batch jobs per call
//     (each call is one transaction); these n jobs are then the backlog of
//   - claim+complete: a client with MaxWorkers workers on the default queue
//     and River's bench settings is started over the backlog of n no-op
//     jobs; timed from the return of Start to the last completion its
//     subscription reports;
//   - batch insert (COPY): n jobs through Client.InsertManyFast (COPY FROM),
//     batch jobs per call, each call one transaction.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type options struct {
	url        string
	jobs       int
	batch      int
	workers    int
	jsonOut    bool
	results    string
	skipIfDown bool
	timeout    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL URL (the run makes and drops a schema of its own there)")
	flag.IntVar(&o.jobs, "n", 100000, "jobs per measure")
	flag.IntVar(&o.batch, "batch", 1000, "jobs per InsertMany / InsertManyFast call")
	flag.IntVar(&o.workers, "workers", 2000, "MaxWorkers of the default queue for claim+complete")
	flag.BoolVar(&o.jsonOut, "json", false, "print one JSON object of the figures instead of the text lines")
	flag.StringVar(&o.results, "results", "", "also write the figures to this file as key=value lines, as bench/e2e.sh's RESULTS")
	flag.BoolVar(&o.skipIfDown, "skip-if-down", false, "when no server answers, print one line saying so and exit 0")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if o.jobs < 1 || o.batch < 1 || o.workers < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: river [flags]; -n, -batch and -workers must be at least 1")
		flag.PrintDefaults()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("gave up after -timeout %s: %w", o.timeout, err)
		case errors.Is(err, context.Canceled):
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(os.Stderr, "bench-river: %v\n", err)
		cancel()
		stop()
		os.Exit(1)
	}
}

// noopArgs is the job: River's bench job carries a number too, so the
// JSON encoded per job is the same size.
type noopArgs struct {
	Num int `json:"num"`
}

func (noopArgs) Kind() string { return "benchmark" }

type figure struct {
	key, label, detail string
	jobs               int
	elapsed            time.Duration
}

func (f figure) rate() float64 { return float64(f.jobs) / f.elapsed.Seconds() }

func run(ctx context.Context, o options) error {
	t0 := time.Now()
	cfg, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	// As the river CLI opens its pool for `river bench`; pool_max_conns in
	// the URL still sets the pool size (pgxpool's default otherwise, as there).
	params := cfg.ConnConfig.RuntimeParams
	for k, v := range map[string]string{
		"application_name":                    "cq bench-river",
		"idle_in_transaction_session_timeout": "11000",
		"statement_timeout":                   "10000",
	} {
		if params[k] == "" {
			params[k] = v
		}
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)

	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		if o.skipIfDown && ctx.Err() == nil {
			why := "no PostgreSQL server answers at " + where
			if _, answered := errors.AsType[*pgconn.PgError](err); answered {
				why = "the PostgreSQL server at " + where + " refused the connection"
			}
			fmt.Printf("bench-river: skipped: %s (%s); ARGS='-url postgres://…' names another\n", why, oneLine(err))
			return nil
		}
		return fmt.Errorf("connecting to %s: %w", where, err)
	}
	// The schema is dropped through this connection, on a context of its
	// own, so that it goes after a signal or -timeout too.
	defer admin.Close(context.Background())
	var version string
	if err := admin.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return err
	}
	if f := strings.Fields(version); len(f) > 0 {
		version = f[0] // "15.20 (Debian 15.20-0+deb12u1)" is 15.20
	}

	schema := fmt.Sprintf("river_bench_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("creating schema %s: %w", schema, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := admin.Exec(dctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "bench-river: dropping schema %s: %v\n", schema, err)
		}
	}()

	// River is also told the schema, but our own statements (the reset,
	// the checks) rely on search_path.
	params["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: logger, Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
	client, err := river.NewClient(driver, &river.Config{
		// River's bench settings, so that the figure is the one its bench
		// gives; the defaults (100 ms, 1 s) fetch far less often.
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Schema:            schema,
		Workers:           workers,
	})
	if err != nil {
		return err
	}

	say := func(format string, a ...any) {
		if !o.jsonOut {
			fmt.Printf(format+"\n", a...)
		}
	}
	riverVersion := moduleVersion("github.com/riverqueue/river")
	say("river %s on PostgreSQL %s at %s (schema %s), %d jobs per measure, %d cores",
		riverVersion, version, where, schema, o.jobs, runtime.NumCPU())
	var figs []figure
	show := func(f figure) {
		figs = append(figs, f)
		say("%s: %.0f jobs/s (%d jobs in %.2f s, %s)", f.label, f.rate(), f.jobs, f.elapsed.Seconds(), f.detail)
	}
	batchDetail := func(call string) string { return fmt.Sprintf("%s, %d per call, one transaction each", call, o.batch) }

	if err := reset(ctx, pool); err != nil {
		return err
	}
	d, err := insertAll(ctx, o, func(ctx context.Context, p []river.InsertManyParams) error {
		_, err := client.InsertMany(ctx, p)
		return err
	})
	if err != nil {
		return fmt.Errorf("InsertMany: %w", err)
	}
	if err := expectJobs(ctx, pool, "available", o.jobs); err != nil {
		return err
	}
	insertMany := figure{"river_insert_many_jobs_per_s", "river batch insert", batchDetail("InsertMany"), o.jobs, d}

	d, err = claimComplete(ctx, client, o.jobs)
	if err != nil {
		return fmt.Errorf("claim+complete: %w", err)
	}
	if err := expectJobs(ctx, pool, "completed", o.jobs); err != nil {
		return err
	}
	show(figure{"river_claim_complete_jobs_per_s", "river claim+complete",
		fmt.Sprintf("MaxWorkers %d, from Start to the last completion", o.workers), o.jobs, d})
	show(insertMany)

	if err := reset(ctx, pool); err != nil {
		return err
	}
	d, err = insertAll(ctx, o, func(ctx context.Context, p []river.InsertManyParams) error {
		_, err := client.InsertManyFast(ctx, p)
		return err
	})
	if err != nil {
		return fmt.Errorf("InsertManyFast: %w", err)
	}
	if err := expectJobs(ctx, pool, "available", o.jobs); err != nil {
		return err
	}
	show(figure{"river_insert_many_fast_jobs_per_s", "river batch insert (COPY)", batchDetail("InsertManyFast"), o.jobs, d})
	say("measuring took %.0f s", time.Since(t0).Seconds())

	return report(o, riverVersion, version, figs)
}

// reset empties the job table as River's bench does before a run, so that
// each measure starts without the dead rows of the one before.
func reset(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{"TRUNCATE river_job", "VACUUM FULL river_job"} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// insertAll inserts o.jobs jobs, o.batch per call of insert, and returns
// how long the calls took. The batch slice is reused, as in River's bench,
// so that building it is not what is timed.
func insertAll(ctx context.Context, o options, insert func(context.Context, []river.InsertManyParams) error) (time.Duration, error) {
	batch := make([]river.InsertManyParams, o.batch)
	var elapsed time.Duration
	for done := 0; done < o.jobs; {
		p := batch[:min(o.batch, o.jobs-done)]
		for i := range p {
			p[i].Args = noopArgs{Num: done + i + 1}
		}
		t := time.Now()
		if err := insert(ctx, p); err != nil {
			return 0, err
		}
		elapsed += time.Since(t)
		done += len(p)
	}
	return elapsed, nil
}

// claimComplete starts client over the backlog and waits for n jobs to end.
// Like River's bench it counts the ends its subscription reports, which
// come after the completer has written them, and times from the return of
// Start to the last one.
func claimComplete(ctx context.Context, client *river.Client[pgx.Tx], n int) (time.Duration, error) {
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		// Large enough for every event: one dropped would leave the count
		// short and the wait unending.
		ChanSize: n,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()

	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	// After Start, as River's bench starts its clock.
	start := time.Now()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = client.Stop(sctx)
	}()

	const stall = 30 * time.Second
	idle := time.NewTimer(stall)
	defer idle.Stop()
	var completed, other int
	var last time.Time
	for completed+other < n {
		select {
		case ev, ok := <-events:
			if !ok {
				return 0, errors.New("the subscription closed early")
			}
			last = time.Now()
			if ev.Kind == river.EventKindJobCompleted {
				completed++
			} else {
				other++
			}
			idle.Reset(stall)
		case <-idle.C:
			return 0, fmt.Errorf("no job ended for %s (%d of %d done)", stall, completed+other, n)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if other > 0 {
		return 0, fmt.Errorf("%d of %d no-op jobs did not complete", other, n)
	}
	return last.Sub(start), nil
}

func expectJobs(ctx context.Context, pool *pgxpool.Pool, state string, n int) error {
	var got int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = $1", state).Scan(&got); err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%d jobs %s, want %d", got, state, n)
	}
	return nil
}

// report writes the figures as JSON (-json) and as key=value lines
// (-results), the form bench/goals.sh reads bench/e2e.sh's figures in.
func report(o options, riverVersion, pgVersion string, figs []figure) error {
	type kv struct {
		k string
		v any
	}
	pairs := []kv{
		{"river_version", riverVersion}, {"river_pg_version", pgVersion},
		{"river_jobs", o.jobs}, {"river_batch", o.batch}, {"river_max_workers", o.workers},
	}
	for _, f := range figs {
		pairs = append(pairs, kv{f.key, int64(f.rate() + 0.5)})
	}
	if o.jsonOut {
		m := make(map[string]any, len(pairs))
		for _, p := range pairs {
			m[p.k] = p.v
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
	}
	if o.results != "" {
		var b strings.Builder
		for _, p := range pairs {
			fmt.Fprintf(&b, "%s=%v\n", p.k, p.v)
		}
		tmp := o.results + ".tmp"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, o.results)
	}
	return nil
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
