package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestURLAccepted: a URL of known parameters parses into pgx's
// configuration, cq's own parameters (schema, search_path) taken out of
// it and cq's session settings put in.
func TestURLAccepted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url    string
		schema string
		check  func(t *testing.T, c *Config)
	}{
		{"postgres://u@h/db", "cq", func(t *testing.T, c *Config) {
			cc := c.Pool.ConnConfig
			if cc.Host != "h" || cc.Port != 5432 || cc.User != "u" || cc.Database != "db" {
				t.Errorf("host %s port %d user %s database %s", cc.Host, cc.Port, cc.User, cc.Database)
			}
			if cc.ConnectTimeout != defaultConnectTimeout || cc.ValidateConnect != nil {
				t.Errorf("connect timeout %s, validate %v: want the default, and any host", cc.ConnectTimeout, cc.ValidateConnect != nil)
			}
			if c.Addr != "postgres://u@h/db?schema=cq" {
				t.Errorf("Addr %s", c.Addr)
			}
		}},
		{"postgresql://u:s3cret@h:5433/db?sslmode=disable&application_name=jobs&connect_timeout=3&schema=work", "work", func(t *testing.T, c *Config) {
			cc := c.Pool.ConnConfig
			if cc.Port != 5433 || cc.Password != "s3cret" || cc.TLSConfig != nil || cc.ConnectTimeout != 3*time.Second {
				t.Errorf("port %d password %q TLS %v connect timeout %s", cc.Port, cc.Password, cc.TLSConfig != nil, cc.ConnectTimeout)
			}
			if cc.RuntimeParams["application_name"] != "jobs" {
				t.Errorf("application_name %q", cc.RuntimeParams["application_name"])
			}
			if strings.Contains(c.Addr, "s3cret") || c.Addr != "postgres://u@h:5433/db?schema=work" {
				t.Errorf("Addr %s", c.Addr)
			}
		}},
		{"postgres://h/db?search_path=work", "work", nil},
		{"postgres://h/db?schema=work&search_path=work", "work", nil},
		{"postgres://h/db?sslmode=require&sslmode=require", "cq", nil},
		{"postgres:///db?host=/var/run/postgresql&port=5433&user=u", "cq", func(t *testing.T, c *Config) {
			cc := c.Pool.ConnConfig
			if cc.Host != "/var/run/postgresql" || cc.Port != 5433 || cc.User != "u" {
				t.Errorf("host %s port %d user %s", cc.Host, cc.Port, cc.User)
			}
		}},
		{"postgres://u@a,b:5433,[::1]:5434/db", "cq", func(t *testing.T, c *Config) {
			cc := c.Pool.ConnConfig
			if hosts := hostList(c); hosts != "[a:5432 b:5433 ::1:5434]" {
				t.Errorf("hosts %v", hosts)
			}
			if cc.ValidateConnect == nil {
				t.Error("several hosts and no read-write check")
			}
		}},
		{"postgres://a,b/db?target_session_attrs=primary", "cq", nil},
		{"postgres://h/db?connect_timeout=0", "cq", func(t *testing.T, c *Config) {
			if c.Pool.ConnConfig.ConnectTimeout != 0 {
				t.Errorf("connect_timeout=0 gave %s: a user's 0 (wait for ever) stands", c.Pool.ConnConfig.ConnectTimeout)
			}
		}},
		{"postgres://h/d%20b?application_name=a%26b", "cq", func(t *testing.T, c *Config) {
			if cc := c.Pool.ConnConfig; cc.Database != "d b" || cc.RuntimeParams["application_name"] != "a&b" {
				t.Errorf("database %q application_name %q", cc.Database, cc.RuntimeParams["application_name"])
			}
		}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if c.Schema != tc.schema {
				t.Errorf("schema %q, want %q", c.Schema, tc.schema)
			}
			rp := c.Pool.ConnConfig.RuntimeParams
			for _, k := range []string{"schema", "sslmode", "connect_timeout", "target_session_attrs", "host", "port", "user", "dbname", "password"} {
				if _, ok := rp[k]; ok {
					t.Errorf("%s reached the server's settings: %v", k, rp)
				}
			}
			if rp["search_path"] != `"`+tc.schema+`"` {
				t.Errorf("search_path %q", rp["search_path"])
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// TestURLRefused: an unknown parameter, a bad value, or parameters that
// contradict each other are refused before anything connects, as an
// ErrBadURL naming the parameter, never quoting a password.
func TestURLRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, key, why string
	}{
		{"postgres://u:s3cret@h/db?frobnicate=1", "frobnicate", "cq accepts application_name, connect_timeout"},
		{"postgres://h/db?statement_timeout=0", "statement_timeout", "does not know it"},
		{"postgres://h/db?options=-csearch_path%3Dx", "options", "does not know it"},
		{"postgres://h/db?pool_max_conns=50", "pool_max_conns", "does not know it"},
		{"postgres://h/db?SSLMODE=disable", "SSLMODE", `lower case: write "sslmode"`},
		{"postgres://h/db?ssl=true", "ssl", "sslmode=require"},
		{"postgres://h/db?database=x", "database", "dbname="},
		{"postgres://h/db?sslmode=bogus", "sslmode", "want one of disable"},
		{"postgres://h/db?sslmode=disable&sslmode=require", "sslmode", "twice"},
		{"postgres://h/db?sslmode=disable&sslrootcert=/r.crt", "sslrootcert", "sslmode=disable"},
		{"postgres://h/db?sslcert=/c.crt&sslkey=/c.key&sslmode=disable", "sslcert", "sslmode=disable"},
		{"postgres://h/db?sslcert=/c.crt", "sslcert", "give sslkey"},
		{"postgres://h/db?sslkey=/c.key", "sslkey", "give sslcert"},
		{"postgres://h/db?schema=Work", "schema", "lower-case"},
		{"postgres://h/db?schema=pg_work", "schema", "PostgreSQL's own"},
		{"postgres://h/db?schema=a%3Bdrop", "schema", "lower-case"},
		{"postgres://h/db?schema=" + strings.Repeat("a", 64), "schema", "63 bytes"},
		{"postgres://h/db?schema=a&search_path=b", "search_path", "another schema"},
		{"postgres://h/db?search_path=a,public", "search_path", "one schema"},
		{"postgres://h/db?host=other", "host", "give it once"},
		{"postgres://h:5432/db?port=5433", "port", "give it once"},
		{"postgres://u@h/db?user=v", "user", "give it once"},
		{"postgres://u:p@h/db?password=q", "password", "give it once"},
		{"postgres://h/db?dbname=other", "dbname", "give it once"},
		{"postgres://h/db?connect_timeout=-1", "connect_timeout", "whole number"},
		{"postgres://h/db?connect_timeout=5s", "connect_timeout", "whole number"},
		{"postgres://a,b/db?target_session_attrs=any", "target_session_attrs", "read-write"},
		{"postgres://h/db?target_session_attrs=rw", "target_session_attrs", "want one of"},
		{"postgres://h/db?novalue", "novalue", "key=value"},
		{"postgres://h/db?a=b=c", "a", "key=value"},
		{"postgres://h/db?application_name=a%2", "application_name", "hexadecimal"},
		{"postgres://h/db?application_name=a%00", "application_name", "%00"},
		{"mysql://h/db", "", "want postgres://"},
		{"postgres://h/db\x00", "", "NUL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			c, err := ParseURL(tc.url)
			var ue *URLError
			if !errors.As(err, &ue) || !errors.Is(err, ErrBadURL) {
				t.Fatalf("ParseURL = %v, %v; want a URLError", c, err)
			}
			if ue.Key != tc.key || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %q (key %q); want key %q, saying %q", err, ue.Key, tc.key, tc.why)
			}
			if tc.key != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.key)) {
				t.Errorf("error %q does not name %q", err, tc.key)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestURLsMerged: several URLs are one database through several servers:
// their hosts merge, in order, into one configuration whose connections
// go to the first host that accepts writes; they must agree on
// everything else.
func TestURLsMerged(t *testing.T) {
	t.Parallel()
	c, err := ParseURLs([]string{
		"postgres://u:pw@a:5432/db?sslmode=disable&schema=work",
		"postgresql://u:pw@b:5433,c/db?sslmode=disable&schema=work",
	})
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Pool.ConnConfig
	if hosts := hostList(c); hosts != "[a:5432 b:5433 c:5432]" || cc.ValidateConnect == nil || c.Schema != "work" || cc.Password != "pw" {
		t.Errorf("hosts %v, read-write check %v, schema %s", hosts, cc.ValidateConnect != nil, c.Schema)
	}
	if c.Addr != "postgres://u@a:5432,b:5433,c/db?schema=work" {
		t.Errorf("Addr %s", c.Addr)
	}

	for _, tc := range []struct {
		urls []string
		n    int
		key  string
	}{
		{[]string{"postgres://a/db?sslmode=require", "postgres://b/db?sslmode=disable"}, 2, "sslmode"},
		{[]string{"postgres://a/db?sslmode=require", "postgres://b/db"}, 2, "sslmode"},
		{[]string{"postgres://a/db", "postgres://b/db?application_name=x"}, 2, "application_name"},
		{[]string{"postgres://a/db?schema=x", "postgres://b/db?schema=y"}, 2, "schema"},
		{[]string{"postgres://u@a/db", "postgres://v@b/db"}, 2, "user"},
		{[]string{"postgres://u:p@a/db", "postgres://u@b/db"}, 2, "password"},
		{[]string{"postgres://a/db", "postgres://b/other"}, 2, "dbname"},
		{[]string{"postgres:///db?host=/run/a", "postgres://b/db"}, 1, ""},
		{[]string{"postgres://a/db", "postgres://b/db?port=5433"}, 2, "port"},
		{[]string{"postgres://a/db?target_session_attrs=any", "postgres://b/db?target_session_attrs=any"}, 0, "target_session_attrs"},
		{[]string{"postgres://a/db", "postgres://b/db?frobnicate=1"}, 2, "frobnicate"},
	} {
		_, err := ParseURLs(tc.urls)
		var ue *URLError
		if !errors.As(err, &ue) || ue.N != tc.n || ue.Key != tc.key {
			t.Errorf("%v: %v; want URL %d's %q refused", tc.urls, err, tc.n, tc.key)
		}
	}
	if _, err := ParseURLs(nil); !errors.Is(err, ErrBadURL) {
		t.Errorf("no URL: %v", err)
	}
}

// TestSplitURLs: a comma starts a new URL only before postgres:// or
// postgresql://, so a URL may list several hosts.
func TestSplitURLs(t *testing.T) {
	t.Parallel()
	for list, want := range map[string][]string{
		"postgres://a/db":                                     {"postgres://a/db"},
		"postgres://a,b:5433/db?sslmode=disable":              {"postgres://a,b:5433/db?sslmode=disable"},
		"postgres://a/db, postgresql://b,c/db ,postgres://d/": {"postgres://a/db", "postgresql://b,c/db", "postgres://d/"},
		"":  nil,
		",": {","},
	} {
		if got := SplitURLs(list); !slices.Equal(got, want) {
			t.Errorf("SplitURLs(%q) = %q, want %q", list, got, want)
		}
	}
}

// TestSessionSettings: every session cq opens carries its settings, and
// the URL's application_name wins over cq's default.
func TestSessionSettings(t *testing.T) {
	t.Parallel()
	c, err := ParseURL("postgres://h/db?schema=work")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"application_name":                    "cq",
		"search_path":                         `"work"`,
		"statement_timeout":                   statementTimeout,
		"idle_in_transaction_session_timeout": idleInTransactionTimeout,
		"tcp_keepalives_idle":                 "5",
		"tcp_keepalives_interval":             "2",
		"tcp_keepalives_count":                "3",
		"timezone":                            "UTC",
	}
	for k, v := range want {
		if got := c.Pool.ConnConfig.RuntimeParams[k]; got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if c.Pool.MaxConns != defaultMaxConns || c.Pool.AfterConnect == nil {
		t.Errorf("pool of %d, after-connect hook %v", c.Pool.MaxConns, c.Pool.AfterConnect != nil)
	}
	for v, want := range map[string]int{"15.4 (Debian 15.4-1.pgdg120+1)": 15, "13.0": 13, "17beta1": 17, "": 0, "x": 0} {
		if got := serverMajor(v); got != want {
			t.Errorf("serverMajor(%q) = %d, want %d", v, got, want)
		}
	}
}

// TestWithSchema: the schema a URL selects is replaced, whether it was
// given as schema= or search_path=, and the rest kept.
func TestWithSchema(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@h/db":                                   "postgres://u:p@h/db?schema=x",
		"postgres://h/db?sslmode=disable&schema=a":              "postgres://h/db?sslmode=disable&schema=x",
		"postgresql://h/db?search_path=a&application_name=m%20": "postgresql://h/db?application_name=m%20&schema=x",
	} {
		got, err := WithSchema(in, "x")
		if err != nil || got != want {
			t.Errorf("WithSchema(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := WithSchema("postgres://h/db", "X"); !errors.Is(err, ErrBadURL) {
		t.Errorf("WithSchema to X: %v", err)
	}
}

// hostList is the hosts c connects to, in order, as host:port (a host
// tried with TLS and then without once).
func hostList(c *Config) string {
	cc := c.Pool.ConnConfig
	hosts := []string{fmt.Sprintf("%s:%d", cc.Host, cc.Port)}
	for _, f := range cc.Fallbacks {
		hosts = append(hosts, fmt.Sprintf("%s:%d", f.Host, f.Port))
	}
	return fmt.Sprint(slices.Compact(hosts))
}
