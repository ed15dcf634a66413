// Package pgtest gives tests a PostgreSQL database of their own: the
// server they use (Server), a new schema on it for each test (Schema),
// and a digest of what a schema holds (Contents), to tell that a refused
// store was left untouched.
//
// The server is the one $CQ_TEST_PG_URL names. When it is set, a server
// that does not answer fails every test that needs it: the run asked for
// PostgreSQL and must not pass without it (CQ_TEST_PG_URL=skip skips
// them instead). When it is unset, the tests use the local server at
// DefaultURL when one answers there, and otherwise skip, saying why in
// one line.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cq-dev/cq/internal/store/postgres"
	"github.com/jackc/pgx/v5"
)

// EnvURL names the server the tests use.
const EnvURL = "CQ_TEST_PG_URL"

// DefaultURL is the local server tried when $CQ_TEST_PG_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// probeTimeout bounds the one connection made to tell whether a server
// answers.
const probeTimeout = 5 * time.Second

// choice is the server the tests use, or why there is none: skip (the
// tests skip) or fail (they fail).
type choice struct{ url, skip, fail string }

// choose decides, from $CQ_TEST_PG_URL (env, and whether it is set) and
// probe's answer for a URL, which server the tests use.
func choose(env string, set bool, probe func(url string) error) choice {
	switch {
	case set && env == "skip":
		return choice{skip: fmt.Sprintf("$%s=skip", EnvURL)}
	case set && env != "":
		if err := probe(env); err != nil {
			return choice{fail: fmt.Sprintf("$%s names a PostgreSQL server that cannot be used: %s", EnvURL, oneLine(err))}
		}
		return choice{url: env}
	}
	if err := probe(DefaultURL); err != nil {
		return choice{skip: fmt.Sprintf("no PostgreSQL server at %s (%s); set $%s to test against one", DefaultURL, oneLine(err), EnvURL)}
	}
	return choice{url: DefaultURL}
}

// chosen is choose's answer for this process, found once.
var chosen = sync.OnceValue(func() choice {
	env, set := os.LookupEnv(EnvURL)
	return choose(env, set, probe)
})

// probe connects to url and runs one statement.
func probe(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Server is the URL of the server the tests use. When there is none, it
// skips t, or fails it when $CQ_TEST_PG_URL named one (see the package
// doc).
func Server(t testing.TB) string {
	t.Helper()
	c := chosen()
	switch {
	case c.fail != "":
		t.Fatal(c.fail)
	case c.skip != "":
		t.Skip(c.skip)
	}
	return c.url
}

// Find is Server for code that has no testing.TB (a test script's
// set-up): the server's URL, or why there is none, to skip (skip) or to
// fail (err).
func Find() (url, skip string, err error) {
	c := chosen()
	if c.fail != "" {
		return "", "", fmt.Errorf("%s", c.fail)
	}
	return c.url, c.skip, nil
}

// Schema is a URL of the server the tests use (Server) that selects a new,
// empty schema of its own, dropped with everything in it at the end of t.
func Schema(t testing.TB) string {
	t.Helper()
	url, drop, err := NewSchema(context.Background(), Server(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(context.Background()); err != nil {
			t.Errorf("drop the test's schema: %v", err)
		}
	})
	return url
}

// NewName is a schema name no other test takes: cqtest_ and 12 random
// hexadecimal digits.
func NewName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "cqtest_" + hex.EncodeToString(b)
}

// NewSchema creates a new, empty schema in the database at base and
// returns base's URL selecting it (schema=), and drop, which drops it
// with everything in it.
func NewSchema(ctx context.Context, base string) (url string, drop func(context.Context) error, err error) {
	name := NewName()
	url, err = postgres.WithSchema(base, name)
	if err != nil {
		return "", nil, err
	}
	if err := exec(ctx, url, `CREATE SCHEMA `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	drop = func(ctx context.Context) error {
		return exec(ctx, url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
	}
	return url, drop, nil
}

// URLFor is a URL of base's database that selects schema name, which may
// not exist: Open creates it. The schema is dropped at the end of t.
func URLFor(t testing.TB, base, name string) string {
	t.Helper()
	url, err := postgres.WithSchema(base, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := exec(context.Background(), url, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop the test's schema: %v", err)
		}
	})
	return url
}

// exec runs sql on a connection of its own to url's database.
func exec(ctx context.Context, url, sql string) error {
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// Contents is a digest of everything url's schema holds, in a form that
// tells two states apart: whether it exists, each of its objects (tables
// with their columns, indexes, sequences, functions), and each table's
// rows.
func Contents(ctx context.Context, url string) (string, error) {
	cfg, err := postgres.ParseURL(url)
	if err != nil {
		return "", err
	}
	c, err := pgx.ConnectConfig(ctx, cfg.Pool.ConnConfig)
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var b strings.Builder
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, cfg.Schema).Scan(&exists); err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "schema %s exists: %v\n", cfg.Schema, exists)
	rows, err := c.Query(ctx, `SELECT c.relname, c.relkind::text,
			coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
				FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1
		UNION ALL
		SELECT p.proname, 'function', pg_get_function_identity_arguments(p.oid)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1
		ORDER BY 1, 2`, cfg.Schema)
	if err != nil {
		return "", err
	}
	var tables []string
	for rows.Next() {
		var name, kind, cols string
		if err := rows.Scan(&name, &kind, &cols); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %s (%s)\n", kind, name, cols)
		if kind == "r" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	for _, tb := range tables {
		var n int
		var digest string
		q := `SELECT count(*), coalesce(md5(string_agg(t::text, E'\n' ORDER BY t::text)), '') FROM ` + pgx.Identifier{cfg.Schema, tb}.Sanitize() + ` t`
		if err := c.QueryRow(ctx, q).Scan(&n, &digest); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "rows of %s: %d, md5 %s\n", tb, n, digest)
	}
	return b.String(), nil
}
