package postgres

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A database URL is checked here before pgx sees it. pgx passes every
// query parameter it does not know to the server as a run-time setting:
// a typo fails only when a connection is made, and a real setting's name
// silently changes how cq's sessions behave. So each parameter must be one
// cq knows, with a value it accepts, and none may contradict another. The
// session settings cq relies on are cq's own (open.go), never the URL's.
//
// The grammar is libpq's: postgres[ql]://[user[:password]@][host[:port][,…]][/dbname][?key=value&…],
// each part percent-encoded, several hosts separated by commas.

// urlParam is what cq knows of one query parameter.
type urlParam struct {
	// check returns why a value is refused, "" when it is accepted; nil
	// accepts any value.
	check func(v string) string
}

// urlParams is the whitelist: every query parameter cq accepts.
// docs/store.md (PostgreSQL) says what each does.
var urlParams = map[string]urlParam{
	"application_name":     {},
	"connect_timeout":      {check: checkSeconds},
	"dbname":               {},
	"host":                 {},
	"password":             {},
	"port":                 {},
	"schema":               {check: checkSchema},
	"search_path":          {check: checkSearchPath},
	"sslcert":              {},
	"sslkey":               {},
	"sslmode":              {check: oneOf("disable", "allow", "prefer", "require", "verify-ca", "verify-full")},
	"sslrootcert":          {},
	"target_session_attrs": {check: oneOf("any", "read-write", "read-only", "primary", "standby", "prefer-standby")},
	"user":                 {},
}

// acceptedKeys lists urlParams' keys, for messages.
func acceptedKeys() string {
	keys := make([]string, 0, len(urlParams))
	for k := range urlParams {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// DefaultSchema is the schema that holds cq's objects when the URL names
// none.
const DefaultSchema = "cq"

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// checkSchema accepts the schema names cq uses: plain lower-case
// identifiers, which need no quoting anywhere and mean the same to every
// tool, and none of the names PostgreSQL reserves for itself.
func checkSchema(v string) string {
	switch {
	case !schemaName.MatchString(v) || len(v) > 63:
		return "want a schema name of lower-case letters, digits and _, starting with a letter or _, at most 63 bytes"
	case strings.HasPrefix(v, "pg_"):
		return "names starting with pg_ are PostgreSQL's own"
	}
	return ""
}

// checkSearchPath accepts a search_path that names one schema, which is
// then the schema of cq's objects, as schema= would name it.
func checkSearchPath(v string) string {
	if strings.Contains(v, ",") {
		return "cq keeps its objects in one schema and its sessions search only that one: give one name (or use schema=)"
	}
	return checkSchema(v)
}

func checkSeconds(v string) string {
	if n, err := strconv.Atoi(v); err != nil || n < 0 || strings.Trim(v, "0123456789") != "" {
		return "want a whole number of seconds"
	}
	return ""
}

func oneOf(values ...string) func(string) string {
	return func(v string) string {
		if slices.Contains(values, v) {
			return ""
		}
		return "want one of " + strings.Join(values, ", ")
	}
}

// pgURL is one database URL taken apart, its parameters checked.
type pgURL struct {
	scheme string // postgres or postgresql
	// userinfo, hosts and dbname are the raw (still encoded) parts; ""
	// when absent.
	userinfo, hosts, dbname string
	// user, password and db are decoded; hasPassword tells an empty
	// password from none.
	user, password, db string
	hasPassword        bool
	// params are the query parameters, decoded, each key once.
	params map[string]string
	// keys are params' keys in the order given.
	keys []string
}

// hostCount is how many hosts u names, in its address or its host
// parameter (0: none, pgx's default).
func (u *pgURL) hostCount() int {
	h := u.hosts
	if v, ok := u.params["host"]; ok {
		h = v
	}
	if h == "" {
		return 0
	}
	return strings.Count(h, ",") + 1
}

// parseURL takes raw apart and checks each of its parameters on its own;
// n is its place in a list (0 alone), for messages.
func parseURL(raw string, n int) (*pgURL, error) {
	fail := func(key, why string, a ...any) error {
		return &URLError{N: n, Key: key, Why: fmt.Sprintf(why, a...)}
	}
	u := &pgURL{params: map[string]string{}}
	var p string
	var ok bool
	if p, ok = strings.CutPrefix(raw, "postgresql://"); ok {
		u.scheme = "postgresql"
	} else if p, ok = strings.CutPrefix(raw, "postgres://"); ok {
		u.scheme = "postgres"
	} else {
		return nil, fail("", "want postgres:// or postgresql://")
	}
	if strings.IndexByte(raw, 0) >= 0 {
		return nil, fail("", "it holds a NUL byte")
	}
	// As in libpq, only a '/' ends the search for the user part: an '@'
	// before the first '/' ends it, even one that looks like it is in the
	// query.
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		u.userinfo, p = p[:i], p[i+1:]
		user, pass, hasPass := strings.Cut(u.userinfo, ":")
		var err error
		if u.user, err = uriDecode(user); err != nil {
			return nil, fail("user", "%v", err)
		}
		if u.password, err = uriDecode(pass); err != nil {
			return nil, fail("password", "%v", err)
		}
		u.hasPassword = hasPass
	}
	i := strings.IndexAny(p, "/?")
	if i < 0 {
		i = len(p)
	}
	u.hosts, p = p[:i], p[i:]
	if rest, ok := strings.CutPrefix(p, "/"); ok {
		u.dbname, p, _ = strings.Cut(rest, "?")
		p = "?" + p
		var err error
		if u.db, err = uriDecode(u.dbname); err != nil {
			return nil, fail("dbname", "%v", err)
		}
	}
	if query, _ := strings.CutPrefix(p, "?"); query != "" {
		if err := u.parseQuery(query, n); err != nil {
			return nil, err
		}
	}
	if err := u.checkConflicts(n); err != nil {
		return nil, err
	}
	return u, nil
}

// parseQuery reads and checks the query's parameters into u.params.
func (u *pgURL) parseQuery(query string, n int) error {
	fail := func(key, why string, a ...any) error {
		return &URLError{N: n, Key: key, Why: fmt.Sprintf(why, a...)}
	}
	for pair := range strings.SplitSeq(query, "&") {
		rawKey, rawValue, found := strings.Cut(pair, "=")
		key, err := uriDecode(rawKey)
		if err != nil {
			return fail("", "a parameter's name: %v", err)
		}
		if !found || strings.Contains(rawValue, "=") {
			return fail(key, "want key=value, with one =")
		}
		value, err := uriDecode(rawValue)
		if err != nil {
			return fail(key, "%v", err)
		}
		if err := checkParam(key, value, n); err != nil {
			return err
		}
		if old, dup := u.params[key]; dup {
			if old != value {
				return fail(key, "given twice, with different values")
			}
			continue
		}
		u.params[key] = value
		u.keys = append(u.keys, key)
	}
	return nil
}

// checkParam checks one parameter against the whitelist.
func checkParam(key, value string, n int) error {
	p, known := urlParams[key]
	if !known {
		why := "cq does not know it, and passes nothing to the server unchecked; cq accepts " + acceptedKeys()
		lower := strings.ToLower(key)
		if _, ok := urlParams[lower]; ok {
			why = fmt.Sprintf("parameter names are lower case: write %q", lower)
		} else if lower == "ssl" {
			why = "write sslmode=require (or verify-full) instead"
		} else if lower == "database" {
			why = "write dbname= instead, or name the database in the URL's path"
		}
		return &URLError{N: n, Key: key, Why: why}
	}
	if p.check != nil {
		if why := p.check(value); why != "" {
			return &URLError{N: n, Key: key, Why: why}
		}
	}
	return nil
}

// checkConflicts refuses parameters that contradict each other or the
// URL's address within one URL.
func (u *pgURL) checkConflicts(n int) error {
	fail := func(key, why string) error { return &URLError{N: n, Key: key, Why: why} }
	has := func(k string) bool { _, ok := u.params[k]; return ok }
	if has("host") && u.hosts != "" {
		return fail("host", "the URL names its host before the path as well: give it once")
	}
	if has("port") && hostsHavePort(u.hosts) {
		return fail("port", "the URL gives a port after its host as well: give it once")
	}
	if has("user") && u.user != "" {
		return fail("user", "the URL names its user before the host as well: give it once")
	}
	if has("password") && u.hasPassword {
		return fail("password", "the URL gives a password before the host as well: give it once")
	}
	if has("dbname") && u.db != "" {
		return fail("dbname", "the URL names its database in the path as well: give it once")
	}
	if has("schema") && has("search_path") && u.params["schema"] != u.params["search_path"] {
		return fail("search_path", "it names another schema than schema= does: cq keeps its objects in one")
	}
	if u.params["sslmode"] == "disable" {
		for _, k := range []string{"sslrootcert", "sslcert", "sslkey"} {
			if has(k) {
				return fail(k, "sslmode=disable turns TLS off, so this file would go unused: drop one of the two")
			}
		}
	}
	if has("sslcert") != has("sslkey") {
		if has("sslcert") {
			return fail("sslcert", "a client certificate needs its key: give sslkey too")
		}
		return fail("sslkey", "a client key needs its certificate: give sslcert too")
	}
	if tsa, ok := u.params["target_session_attrs"]; ok && u.hostCount() > 1 && tsa != "read-write" && tsa != "primary" {
		return fail("target_session_attrs", "with several hosts, cq connects to the first that accepts writes: want read-write (the default) or primary")
	}
	return nil
}

// hostsHavePort reports whether a raw host list gives a port after any
// of its hosts (an IPv6 address is in brackets, its colons aside).
func hostsHavePort(hosts string) bool {
	for h := range strings.SplitSeq(hosts, ",") {
		if i := strings.LastIndexByte(h, ']'); i >= 0 {
			h = h[i+1:]
		}
		if strings.Contains(h, ":") {
			return true
		}
	}
	return false
}

// mergeURLs makes one URL of several, for primary-first failover: the
// hosts of each, in the order given, and everything else the same. So
// every URL must give the same user, password, database and parameters
// (a URL that left one out would get the others' silently), and name
// its hosts in its address.
func mergeURLs(us []*pgURL) (*pgURL, error) {
	first := us[0]
	if len(us) == 1 {
		return first, nil
	}
	m := *first
	var hosts []string
	for i, u := range us {
		n := i + 1
		fail := func(key, why string, a ...any) error { return &URLError{N: n, Key: key, Why: fmt.Sprintf(why, a...)} }
		if u.hosts == "" {
			return nil, fail("", "with several URLs, each names its hosts in its address (host:port before the path)")
		}
		for _, k := range []string{"host", "port"} {
			if _, ok := u.params[k]; ok {
				return nil, fail(k, "with several URLs, each names its hosts in its address (host:port before the path)")
			}
		}
		hosts = append(hosts, u.hosts)
		if i == 0 {
			continue
		}
		switch {
		case u.user != first.user:
			return nil, fail("user", "it differs from URL 1's: every URL of a list connects as one user")
		case u.password != first.password || u.hasPassword != first.hasPassword:
			return nil, fail("password", "it differs from URL 1's: give every URL of a list the same")
		case u.db != first.db:
			return nil, fail("dbname", "it differs from URL 1's: every URL of a list names one database")
		}
		for _, k := range first.keys {
			v, ok := u.params[k]
			switch {
			case !ok:
				return nil, fail(k, "URL 1 gives it and this one does not: give every URL of a list the same parameters")
			case v != first.params[k]:
				return nil, fail(k, "it differs from URL 1's: give every URL of a list the same parameters")
			}
		}
		for _, k := range u.keys {
			if _, ok := first.params[k]; !ok {
				return nil, fail(k, "URL 1 does not give it: give every URL of a list the same parameters")
			}
		}
	}
	m.hosts = strings.Join(hosts, ",")
	if err := m.checkConflicts(0); err != nil {
		return nil, err
	}
	return &m, nil
}

// SplitURLs splits a comma-separated list of URLs (as CQ_DB_URLS holds):
// a comma starts a new URL only where postgres:// or postgresql://
// follows it (spaces aside), since one URL may list several hosts with
// commas.
func SplitURLs(list string) []string {
	startsURL := func(s string) bool {
		s = strings.TrimLeft(s, " ")
		return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
	}
	var out []string
	for start, i := 0, 0; i <= len(list); i++ {
		if i == len(list) || list[i] == ',' && startsURL(list[i+1:]) {
			if s := strings.TrimSpace(list[start:i]); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	return out
}

// schema is the schema u names for cq's objects.
func (u *pgURL) schema() string {
	if s, ok := u.params["schema"]; ok {
		return s
	}
	if s, ok := u.params["search_path"]; ok {
		return s
	}
	return DefaultSchema
}

// driverURL is u as pgx is to read it: cq's own parameters (schema,
// search_path) left out, every other one as checked.
func (u *pgURL) driverURL() string { return u.format(false) }

// WithSchema is url with its schema set to schema (any schema= or
// search_path= it gave replaced).
func WithSchema(url, schema string) (string, error) {
	u, err := parseURL(url, 0)
	if err != nil {
		return "", err
	}
	if why := checkSchema(schema); why != "" {
		return "", &URLError{Key: "schema", Why: why}
	}
	u.keys = slices.DeleteFunc(u.keys, func(k string) bool { return k == "schema" || k == "search_path" })
	delete(u.params, "search_path")
	u.params["schema"] = schema
	u.keys = append(u.keys, "schema")
	return u.format(true), nil
}

// format writes u back as a URL, with cq's own parameters or without.
func (u *pgURL) format(withCq bool) string {
	var b strings.Builder
	b.WriteString(u.scheme + "://")
	if u.userinfo != "" {
		b.WriteString(u.userinfo + "@")
	}
	b.WriteString(u.hosts)
	if u.dbname != "" {
		b.WriteString("/" + u.dbname)
	}
	sep := "?"
	for _, k := range u.keys {
		if !withCq && (k == "schema" || k == "search_path") {
			continue
		}
		b.WriteString(sep + uriEncode(k) + "=" + uriEncode(u.params[k]))
		sep = "&"
	}
	return b.String()
}

// addr is u without its password or connection parameters: the address
// the store answers as (store.Host.Addr), naming its hosts, database
// and schema.
func (u *pgURL) addr() string {
	var b strings.Builder
	b.WriteString("postgres://")
	if u.user != "" {
		b.WriteString(uriEncode(u.user) + "@")
	}
	b.WriteString(u.hosts)
	b.WriteString("/" + u.dbname)
	sep := "?"
	for _, k := range []string{"host", "port", "user", "dbname"} {
		if v, ok := u.params[k]; ok {
			b.WriteString(sep + k + "=" + uriEncode(v))
			sep = "&"
		}
	}
	b.WriteString(sep + "schema=" + u.schema())
	return b.String()
}

// uriDecode decodes one part of a URL as libpq does: %XX escapes (never
// %00), spaces around it dropped, none inside it.
func uriDecode(raw string) (string, error) {
	raw = strings.Trim(raw, " ")
	if strings.Contains(raw, " ") {
		return "", fmt.Errorf("a space inside it: write %%20")
	}
	if !strings.Contains(raw, "%") {
		return raw, nil
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '%' {
			b.WriteByte(raw[i])
			continue
		}
		if i+2 >= len(raw) {
			return "", fmt.Errorf("a %% not followed by two hexadecimal digits")
		}
		c, err := strconv.ParseUint(raw[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("a %% not followed by two hexadecimal digits")
		}
		if c == 0 {
			return "", fmt.Errorf("%%00 is not allowed")
		}
		b.WriteByte(byte(c))
		i += 2
	}
	return b.String(), nil
}

// uriEncode escapes every byte but letters, digits and -._~, so that
// uriDecode (libpq's and pgx's too) gives s back.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
