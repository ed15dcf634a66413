package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cq-dev/cq/internal/clock"
	"github.com/cq-dev/cq/internal/fsutil"
	"github.com/cq-dev/cq/internal/procs"
	"github.com/cq-dev/cq/internal/queue"
	"github.com/cq-dev/cq/internal/store"
	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/cq-dev/cq/internal/store/sqlite"
	"golang.org/x/term"
)

// App is the factory every command gets: global flags, the standard
// streams, and the store, opened lazily so that --help and --spool never
// touch the database.
type App struct {
	HomeFlag string
	DBFlag   string
	Output   string
	Quiet    bool

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	Now    func() time.Time

	home  string
	store *queue.Store
	// drained is how many spool lines opening the store drained.
	drained int
	// drainSkipped: ReadStore left the spool undrained (a lock was busy).
	drainSkipped bool
	// pgConns, when not 0, is how many connections a PostgreSQL store may
	// hold at once (cq serve answers many requests side by side).
	pgConns int32
}

// Home resolves the home folder (docs/operations.md, Home and files) and creates it private.
func (a *App) Home() (string, error) {
	if a.home != "" {
		return a.home, nil
	}
	abs, err := a.homePath()
	if err != nil {
		return "", err
	}
	if err := fsutil.PrivateDir(abs); err != nil {
		return "", err
	}
	a.home = abs
	return abs, nil
}

// homePath is the home folder Home would use, as an absolute path,
// without creating it.
func (a *App) homePath() (string, error) {
	h := a.HomeFlag
	if h == "" {
		h = a.Getenv("CQ_HOME")
	}
	if h == "" {
		if x := a.Getenv("XDG_STATE_HOME"); x != "" {
			h = filepath.Join(x, "cq")
		}
	}
	if h == "" {
		u, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot find a home folder: set --home or CQ_HOME")
		}
		h = filepath.Join(u, ".local", "state", "cq")
	}
	return filepath.Abs(h)
}

// dbURL is the database cq is pointed at: --db, else $CQ_DB_URLS (a
// comma-separated list of PostgreSQL URLs: a primary and its standbys),
// else $CQ_DB; "" for the home's SQLite file.
func (a *App) dbURL() string {
	if a.DBFlag != "" {
		return a.DBFlag
	}
	if v := a.Getenv("CQ_DB_URLS"); v != "" {
		return v
	}
	return a.Getenv("CQ_DB")
}

// isPostgres reports whether url names a PostgreSQL database.
func isPostgres(url string) bool {
	u := strings.TrimSpace(url)
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// pgConfig is the checked configuration of a PostgreSQL url (or list of
// them); nothing is connected to. A refused parameter is a usage error
// naming it.
func pgConfig(url string) (*postgres.Config, error) {
	cfg, err := postgres.ParseURLs(postgres.SplitURLs(url))
	if err != nil {
		return nil, usageErr("%s", err.Error())
	}
	return cfg, nil
}

// dbPath is the SQLite file of --db or $CQ_DB, else home's cq.db; "" for
// a PostgreSQL database, whose URL is checked here. A URL is checked
// before the home is made, so a refused one leaves nothing behind.
func (a *App) dbPath() (string, error) {
	url := a.dbURL()
	if isPostgres(url) {
		_, err := pgConfig(url)
		return "", err
	}
	if url != "" {
		return sqlite.PathFromURL(url)
	}
	home, err := a.Home()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "cq.db"), nil
}

// Store opens the database (creating and migrating it if needed) and
// drains the spool into it first, as every command that opens the
// database does.
func (a *App) Store(ctx context.Context) (*queue.Store, error) {
	return a.openStore(ctx, false)
}

// readDrainWait is how long a command that only reads waits for the spool
// lock, and then for the store's write lock, to drain the spool.
const readDrainWait = time.Second

// ReadStore is Store for a command that only reads (ls, show, logs, wait,
// events, health, queue ls): when another process holds the spool lock
// or the store's write lock for more than readDrainWait, it reads without
// draining rather than queue behind that write; the lines stay in the
// spool for the next command, worker or heartbeat.
func (a *App) ReadStore(ctx context.Context) (*queue.Store, error) {
	return a.openStore(ctx, true)
}

func (a *App) openStore(ctx context.Context, readOnly bool) (*queue.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	path, err := a.dbPath()
	if err != nil {
		return nil, err
	}
	home, err := a.Home()
	if err != nil {
		return nil, err
	}
	if path == "" {
		cfg, err := pgConfig(a.dbURL())
		if err != nil {
			return nil, err
		}
		if a.pgConns > 0 {
			cfg.Pool.MaxConns = a.pgConns
		}
		d, err := postgres.OpenConfig(ctx, cfg)
		if err != nil {
			if errors.Is(err, postgres.ErrFutureSchema) {
				return nil, err
			}
			return nil, fmt.Errorf("cannot open the store: %w", err)
		}
		return a.useStore(ctx, d.Store(), home, readOnly)
	}
	open := sqlite.Open
	if readOnly {
		open = sqlite.OpenRead
	}
	d, err := open(ctx, path)
	if err != nil {
		var ue *fsutil.UnsafeError
		if errors.As(err, &ue) && ue.Path == path && ue.Link() {
			// A link to a database elsewhere is refused, but that
			// database itself may be used by its own path.
			return nil, &exitErr{code: exitError, msg: ue.Error() + "; give the database's real path with --db"}
		}
		if errors.Is(err, sqlite.ErrFutureSchema) || isStoreFault(err) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot open the store: %w", err)
	}
	// The connection is deliberately not closed at exit: closing the last
	// connection checkpoints and deletes the WAL, a cost every short
	// command would pay; the next process simply reuses it.
	return a.useStore(ctx, d.Store(), home, readOnly)
}

// useStore makes the domain's store over b, and drains the spool of home
// into it.
func (a *App) useStore(ctx context.Context, b store.Store, home string, readOnly bool) (*queue.Store, error) {
	s := queue.New(b)
	if a.Now != nil {
		s.Now = a.Now
	}
	s.StopCancelled = stopHere
	var n int
	var err error
	if readOnly {
		var ok bool
		n, ok, err = s.DrainSpoolWithin(ctx, home, readDrainWait)
		a.drainSkipped = !ok
		if err != nil && ctx.Err() == nil && !fsutil.IsUnsafe(err) {
			// A drain that cannot proceed (a full disk, a read-only
			// store, an unreadable spool) does not stop a read: the store
			// is readable, and the lines wait for a writing command,
			// which reports why. A spool, lock or rejected file that is
			// not cq's own (a symbolic link, a FIFO) is refused by every
			// command: no later one would drain it either.
			a.drainSkipped, err = true, nil
		}
	} else {
		n, err = s.DrainSpool(ctx, home)
	}
	if err != nil {
		if isStoreFault(err) {
			return nil, err // the store's fault, said with its path
		}
		return nil, fmt.Errorf("draining the spool: %w", err)
	}
	a.store, a.drained = s, n
	return s, nil
}

// isStoreFault reports whether err is a store the user must fix (read-only,
// or its disk full): its message names the store and says what to check.
func isStoreFault(err error) bool {
	return errors.Is(err, sqlite.ErrReadOnly) || errors.Is(err, sqlite.ErrFull)
}

// stopHere kills what a run cancelled before its recorded start left
// running on this host (see queue.Store.StopCancelled): its worker may
// have started the process, carrying the run's CQ_RUN_ID, and stalled
// before recording the start. A process elsewhere is its own host's
// worker's to kill, when its start is refused.
func stopHere(rp queue.Reaped) {
	if host, _ := os.Hostname(); rp.Host == "" || rp.Host != host {
		return
	}
	procs.KillRuns([]string{rp.RunID})
}

// DrainSkipped drains the spool now, waiting for the locks as a writing
// command does, if ReadStore left it undrained; it reports whether it
// did. A command that only reads calls it when an id it was given is
// not in the store: the id may be a spooled task not stored yet.
func (a *App) DrainSkipped(ctx context.Context) (bool, error) {
	if a.store == nil || !a.drainSkipped {
		return false, nil
	}
	home, err := a.Home()
	if err != nil {
		return false, err
	}
	if _, err := a.store.DrainSpool(ctx, home); err != nil {
		return false, fmt.Errorf("draining the spool: %w", err)
	}
	a.drainSkipped = false
	return true, nil
}

// findAfterDrain runs find, a lookup of a task by a command that only
// reads; if the task is not found and ReadStore left the spool undrained,
// it drains (see DrainSkipped) and looks once more: the task may have
// been spooled just before.
func findAfterDrain[T any](ctx context.Context, a *App, find func() (T, error)) (T, error) {
	v, err := find()
	if queue.IsNotFound(err) {
		drained, derr := a.DrainSkipped(ctx)
		if derr != nil {
			return v, derr
		}
		if drained {
			return find()
		}
	}
	return v, err
}

// format returns the output format: table, json or jsonl.
func (a *App) format() string {
	if a.Output == "" {
		return "table"
	}
	return a.Output
}

// jsonOut reports whether a command that prints ids prints JSON instead:
// -o json or jsonl, unless -q asks for the ids alone (docs/commands.md, Global flags and output).
func (a *App) jsonOut() bool {
	return !a.Quiet && (a.format() == "json" || a.format() == "jsonl")
}

// stdoutIsTerminal decides between a drawn table and tab-separated lines.
func (a *App) stdoutIsTerminal() bool {
	f, ok := a.Stdout.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (a *App) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return clock.Wall()
}

func (a *App) stderrIsTerminal() bool {
	f, ok := a.Stderr.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
