package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"
)

// Config is a checked database URL, or list of URLs: what OpenConfig
// connects with.
type Config struct {
	// Pool is pgx's configuration of the pool, cq's session settings
	// included. A long-lived process (a worker) may raise Pool.MaxConns
	// before OpenConfig.
	Pool *pgxpool.Config
	// Schema holds cq's objects.
	Schema string
	// Addr is where the store is, without its password (DB.Addr).
	Addr string
}

// The settings of every session cq opens, sent as it connects. They are
// cq's, never the URL's: the whitelist refuses them there.
const (
	// statementTimeout ends a statement that runs this long: a stuck
	// lock or a runaway query, never a normal one (cq's statements touch
	// few rows; cleanup works in batches). Migrations and the wait for
	// the migration lock lift it.
	statementTimeout = "1min"
	// idleInTransactionTimeout ends the session of a client that stopped
	// in the middle of a transaction (frozen, or cut off from the network
	// with its socket still open), so that the rows and locks it held are
	// freed. cq's transactions never wait on anything but the database.
	idleInTransactionTimeout = "30s"
	// The server probes an idle connection after tcpKeepalivesIdle
	// seconds, every tcpKeepalivesInterval, and gives it up after
	// tcpKeepalivesCount probes unanswered: a host that vanished releases
	// its locks within about 11 s instead of the system's default of
	// hours.
	tcpKeepalivesIdle     = 5
	tcpKeepalivesInterval = 2
	tcpKeepalivesCount    = 3
	// clientConnectionCheckInterval is how often the server checks,
	// during a long statement, that the client is still there (PostgreSQL
	// 14 and later, on systems that can tell).
	clientConnectionCheckInterval = "2s"
)

// defaultConnectTimeout bounds each host's connection attempt when the
// URL gives no connect_timeout: a dead primary is given up within it and
// the next host tried.
const defaultConnectTimeout = 5 * time.Second

// defaultMaxConns is the pool's size: a command uses one or two
// connections (the pool opens them as they are needed), and a worker's
// claims, lease renewals, maintenance and reads fit in four. Many hosts'
// workers share the server's max_connections.
const defaultMaxConns = 4

// ParseURL checks a postgres:// or postgresql:// URL against the
// parameters cq knows (ErrBadURL naming the first one refused) and makes
// the configuration OpenConfig connects with. Nothing is connected to.
func ParseURL(url string) (*Config, error) { return ParseURLs([]string{url}) }

// ParseURLs is ParseURL of several URLs, one database reached through
// several servers (a primary and its standbys): their hosts merge, in the
// order given, into one configuration whose new connections go to the
// first host that accepts writes. The URLs must agree on everything but
// their hosts.
func ParseURLs(urls []string) (*Config, error) {
	if len(urls) == 0 {
		return nil, &URLError{Why: "none given"}
	}
	parsed := make([]*pgURL, len(urls))
	for i, raw := range urls {
		n := i + 1
		if len(urls) == 1 {
			n = 0
		}
		u, err := parseURL(raw, n)
		if err != nil {
			return nil, err
		}
		parsed[i] = u
	}
	u, err := mergeURLs(parsed)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(u.driverURL())
	if err != nil {
		// pgx's message names the URL with its password masked.
		return nil, &URLError{Why: err.Error()}
	}
	configure(pc, u)
	return &Config{Pool: pc, Schema: u.schema(), Addr: u.addr()}, nil
}

// configure sets cq's session settings, connection timeout, keepalives
// and pool size on pc, parsed from u.
func configure(pc *pgxpool.Config, u *pgURL) {
	cc := pc.ConnConfig
	rp := cc.RuntimeParams
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "cq"
	}
	// cq's statements name their tables unqualified; its sessions search
	// its schema alone, so no other schema's table of the same name is
	// ever read. The role's and the database's own search_path stay as
	// they are for everyone else.
	rp["search_path"] = pgx.Identifier{u.schema()}.Sanitize()
	rp["statement_timeout"] = statementTimeout
	rp["idle_in_transaction_session_timeout"] = idleInTransactionTimeout
	rp["tcp_keepalives_idle"] = strconv.Itoa(tcpKeepalivesIdle)
	rp["tcp_keepalives_interval"] = strconv.Itoa(tcpKeepalivesInterval)
	rp["tcp_keepalives_count"] = strconv.Itoa(tcpKeepalivesCount)
	// Any time the server formats is UTC, as cq's stored times are.
	rp["timezone"] = "UTC"

	if _, given := u.params["connect_timeout"]; !given && cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = defaultConnectTimeout
	}
	// The client probes its side the same way, so that a call waiting on
	// a server that vanished fails rather than waits for ever.
	dialer := &net.Dialer{Timeout: cc.ConnectTimeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable:   true,
		Idle:     tcpKeepalivesIdle * time.Second,
		Interval: tcpKeepalivesInterval * time.Second,
		Count:    tcpKeepalivesCount,
	}, Control: userTimeout}
	cc.DialFunc = dialer.DialContext
	if cc.ValidateConnect == nil && u.hostCount() > 1 {
		// Several hosts are a primary and its standbys: a new connection
		// goes to the first that accepts writes.
		cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}

	pc.MaxConns = defaultMaxConns
	pc.MinConns = 0
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.AfterConnect = afterConnect
}

// userTimeout bounds, on a TCP connection, how long sent data may stay
// unacknowledged before the kernel gives the connection up: keepalives
// probe only an idle connection, and a query sent to a host that vanished
// (power lost, network cut) would otherwise wait for the retransmissions
// to run out, about 15 minutes. The bound is the keepalives' own.
func userTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	ms := (tcpKeepalivesIdle + tcpKeepalivesInterval*tcpKeepalivesCount) * 1000
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
	}); err != nil {
		return err
	}
	return serr
}

// afterConnect sets what cannot be sent as the session starts: a setting
// older servers do not know would refuse the connection.
func afterConnect(ctx context.Context, c *pgx.Conn) error {
	if serverMajor(c.PgConn().ParameterStatus("server_version")) < 14 {
		return nil
	}
	_, err := c.Exec(ctx, "SET client_connection_check_interval = '"+clientConnectionCheckInterval+"'")
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// A server on a system that cannot check refuses the setting;
		// cq does without it there.
		return nil
	}
	return err
}

// serverMajor is the major version in a server_version such as "15.4
// (Debian 15.4-1)" or "17beta1"; 0 when it cannot tell.
func serverMajor(v string) int {
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// Open checks url (ParseURL), connects, and brings cq's schema up to
// date, creating it when it is missing. A schema written by a newer cq
// is refused untouched (ErrFutureSchema), as is one that holds another
// application's objects (ErrNotCq).
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open of a configuration ParseURL or ParseURLs made.
func OpenConfig(ctx context.Context, cfg *Config) (*DB, error) {
	d, _, err := openWith(ctx, cfg, Migrations())
	return d, err
}

// openWith opens cfg's store and applies ms to it; it returns how many
// of them this call applied.
func openWith(ctx context.Context, cfg *Config, ms []Migration) (*DB, int, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", cfg.Addr, err)
	}
	d := &DB{Pool: pool, Schema: cfg.Schema, addr: cfg.Addr, notifyChannel: channelOf(cfg.Schema)}
	d.clock = &serverClock{d: d}
	n, err := d.migrate(ctx, ms)
	if err != nil {
		pool.Close()
		return nil, 0, err
	}
	if err := d.clock.read(ctx); err != nil {
		pool.Close()
		return nil, 0, fmt.Errorf("%s: read the server's clock: %w", cfg.Addr, err)
	}
	return d, n, nil
}
