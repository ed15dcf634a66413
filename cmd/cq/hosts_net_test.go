package main

// The harness of the multi-host tests (hosts_test.go): hosts as network
// namespaces on a bridge, and private PostgreSQL servers in them. Every
// name carries the test process's pid and a counter, so that runs side
// by side do not meet; everything is undone in t.Cleanup, failed tests
// included. Commands are argv lists, never shell strings.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// hostsSeq numbers the networks this process makes.
var hostsSeq atomic.Int32

// hostsCmd runs one command of the harness (60 s at most) and returns its
// combined output.
func hostsCmd(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The postgres user may not be allowed into the test's folder.
	cmd.Dir = "/"
	// A server started by pg_ctl must not keep the output pipes open.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// hostsMust is hostsCmd failing the test on an error.
func hostsMust(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := hostsCmd(argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// hostsCan probes, once per process, that network namespaces and veth
// pairs can be made here; it returns why not, or "".
var hostsCan = sync.OnceValue(func() string {
	ns := fmt.Sprintf("cqhprobe%d", os.Getpid())
	if _, err := hostsCmd("ip", "netns", "add", ns); err != nil {
		return err.Error()
	}
	defer func() { _, _ = hostsCmd("ip", "netns", "del", ns) }()
	a, b := fmt.Sprintf("cqhp%da", os.Getpid()%100000), fmt.Sprintf("cqhp%db", os.Getpid()%100000)
	if _, err := hostsCmd("ip", "link", "add", a, "type", "veth", "peer", "name", b); err != nil {
		return err.Error()
	}
	defer func() { _, _ = hostsCmd("ip", "link", "del", a) }()
	if _, err := hostsCmd("ip", "link", "set", b, "netns", ns); err != nil {
		return err.Error()
	}
	return ""
})

// hostsPrereqs skips the test, in one line, unless it can make hosts:
// root, ip netns, unshare, runuser and PostgreSQL's server binaries. It
// returns the folder of those binaries.
func hostsPrereqs(t *testing.T) string {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("multi-host test: skipped under -short")
	case os.Getenv("CQ_TEST_DB") == "postgres":
		// The test brings its own servers: the plain pass runs it.
		t.Skip("multi-host test: runs its own servers, skipped under CQ_TEST_DB=postgres")
	case os.Geteuid() != 0:
		t.Skip("multi-host test: needs root for network namespaces")
	}
	for _, tool := range []string{"ip", "unshare", "runuser", "hostname"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("multi-host test: %s not found", tool)
		}
	}
	bin := pgBinDir()
	if bin == "" {
		t.Skip("multi-host test: no PostgreSQL server binaries in /usr/lib/postgresql/*/bin")
	}
	if _, err := user.Lookup("postgres"); err != nil {
		t.Skip("multi-host test: no postgres user to run a server as")
	}
	if why := hostsCan(); why != "" {
		t.Skipf("multi-host test: cannot make network namespaces: %s", strings.Join(strings.Fields(why), " "))
	}
	return bin
}

// pgBinDir is the newest PostgreSQL's server binaries (13 or later), or "".
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", 0
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v < 13 || v <= bestV {
			continue
		}
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup", "postgres", "psql"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			best, bestV = d, v
		}
	}
	return best
}

// hostNet is a bridge in the root namespace, at .1 of its /24, and the
// hosts on it.
type hostNet struct {
	t      *testing.T
	id     string // the start of every name
	subnet string // "10.231.X"
	bridge string
	hosts  int
}

// netHost is a network namespace on the bridge, with one address.
type netHost struct {
	name string // its host name
	ns   string // its namespace
	addr string
	link string // its veth's end on the bridge, in the root namespace
}

// newHostNet makes the bridge, in 10.231.X.0/24 with an X no interface
// of this machine uses yet.
func newHostNet(t *testing.T) *hostNet {
	t.Helper()
	seq := int(hostsSeq.Add(1))
	pid := os.Getpid()
	// Interface names have 15 bytes at most: cqh, 5 digits, the counter
	// and a 2-byte suffix.
	n := &hostNet{t: t, id: fmt.Sprintf("cqh%d%d", pid%100000, seq)}
	n.bridge = n.id + "br"
	addrs := hostsMust(t, "ip", "-o", "-4", "addr", "show")
	for i := range 200 {
		x := 20 + (pid*7+seq*31+i)%200
		if !strings.Contains(addrs, fmt.Sprintf(" 10.231.%d.", x)) {
			n.subnet = fmt.Sprintf("10.231.%d", x)
			break
		}
	}
	if n.subnet == "" {
		t.Fatal("no free 10.231.X.0/24 for the test's network")
	}
	hostsMust(t, "ip", "link", "add", n.bridge, "type", "bridge")
	t.Cleanup(func() {
		if _, err := hostsCmd("ip", "link", "del", n.bridge); err != nil {
			t.Errorf("remove the test's bridge: %v", err)
		}
	})
	hostsMust(t, "ip", "addr", "add", n.subnet+".1/24", "dev", n.bridge)
	hostsMust(t, "ip", "link", "set", n.bridge, "up")
	return n
}

// addHost makes a namespace named after the host, at the next address,
// its loopback and its veth up.
func (n *hostNet) addHost(name string) *netHost {
	t := n.t
	t.Helper()
	i := n.hosts
	n.hosts++
	h := &netHost{name: name, ns: n.id + "-" + name, addr: fmt.Sprintf("%s.%d", n.subnet, 10+i),
		link: fmt.Sprintf("%sb%d", n.id, i)}
	inner := fmt.Sprintf("%sn%d", n.id, i)
	hostsMust(t, "ip", "netns", "add", h.ns)
	t.Cleanup(func() { n.removeHost(h) })
	hostsMust(t, "ip", "link", "add", h.link, "type", "veth", "peer", "name", inner)
	hostsMust(t, "ip", "link", "set", h.link, "master", n.bridge)
	hostsMust(t, "ip", "link", "set", h.link, "up")
	hostsMust(t, "ip", "link", "set", inner, "netns", h.ns)
	hostsMust(t, "ip", "-n", h.ns, "addr", "add", h.addr+"/24", "dev", inner)
	hostsMust(t, "ip", "-n", h.ns, "link", "set", inner, "up")
	hostsMust(t, "ip", "-n", h.ns, "link", "set", "lo", "up")
	return h
}

// removeHost kills what still runs in the host's namespace (the servers
// and workers were stopped before, by cleanups registered later), and
// deletes its veth pair and the namespace.
func (n *hostNet) removeHost(h *netHost) {
	if out, err := hostsCmd("ip", "netns", "pids", h.ns); err == nil {
		var left []string
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				left = append(left, wkDescribeProcs([]int{pid}))
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(left) > 0 {
			n.t.Errorf("host %s: processes left in its namespace, killed: %s", h.name, strings.Join(left, "; "))
		}
	}
	// Deleting the namespace deletes the pair once nothing holds it; the
	// bridge's end is deleted anyway, in case something did.
	_, _ = hostsCmd("ip", "link", "del", h.link)
	if _, err := hostsCmd("ip", "netns", "del", h.ns); err != nil {
		n.t.Errorf("remove host %s: %v", h.name, err)
	}
}

// cut takes the host off the network: its veth's end on the bridge goes
// down, and what it sends or is sent is lost, as with a cable pulled.
func (n *hostNet) cut(h *netHost) {
	n.t.Helper()
	hostsMust(n.t, "ip", "link", "set", h.link, "down")
}

// restore puts the host back on the network.
func (n *hostNet) restore(h *netHost) {
	n.t.Helper()
	hostsMust(n.t, "ip", "link", "set", h.link, "up")
}

// in is argv run in the host's network namespace.
func (h *netHost) in(argv ...string) []string {
	return append([]string{"ip", "netns", "exec", h.ns}, argv...)
}

// named is argv run in the host's network namespace under its host name
// (a UTS namespace of its own). The shell's script is a constant; the
// name and argv are its arguments.
func (h *netHost) named(argv ...string) []string {
	return h.in(append([]string{"unshare", "--uts", "sh", "-c", `hostname "$0" && exec "$@"`, h.name}, argv...)...)
}

// pgServer is a private PostgreSQL server in a host's namespace, on port
// 5432 of the host's address.
type pgServer struct {
	t    *testing.T
	bin  string
	host *netHost
	dir  string // owned by postgres: data/, the log, the socket
	// subnet is the network its clients and standbys come from.
	subnet  string
	stopped bool
}

func (s *pgServer) data() string { return filepath.Join(s.dir, "data") }

func (s *pgServer) logFile() string { return filepath.Join(s.dir, "server.log") }

func (s *pgServer) url() string {
	return "postgres://postgres@" + net.JoinHostPort(s.host.addr, "5432") + "/postgres?sslmode=disable"
}

// asPostgres is a server binary's argv, run as the postgres user in the
// server's namespace.
func (s *pgServer) asPostgres(prog string, args ...string) []string {
	return s.host.in(append([]string{"runuser", "-u", "postgres", "--", filepath.Join(s.bin, prog)}, args...)...)
}

// newPGServer makes the server's folder, owned by postgres and removed at
// the end of the test.
func newPGServer(t *testing.T, bin string, h *netHost) *pgServer {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "cq-hosts-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	subnet := h.addr[:strings.LastIndexByte(h.addr, '.')] + ".0/24"
	return &pgServer{t: t, bin: bin, host: h, dir: dir, subnet: subnet}
}

// appendFile appends lines to a file of the server's (as root: the file
// keeps its owner).
func (s *pgServer) appendFile(name string, lines ...string) {
	s.t.Helper()
	f, err := os.OpenFile(filepath.Join(s.data(), name), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.t.Fatal(err)
	}
}

// startPrimary initialises and starts a server on host h. With sync, a
// commit waits until a standby has it (synchronous_standby_names '*'):
// a commit acknowledged to cq is then on the standby, and survives the
// primary's loss. fsync is off, for speed: the servers are stopped,
// never the machine.
func startPrimary(t *testing.T, bin string, h *netHost, sync bool) *pgServer {
	t.Helper()
	s := newPGServer(t, bin, h)
	hostsMust(t, s.asPostgres("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "--no-sync",
		"-E", "UTF8", "--locale=C")...)
	conf := []string{
		"listen_addresses = '*'",
		"port = 5432",
		"unix_socket_directories = '" + s.dir + "'",
		"fsync = off",
		"full_page_writes = off",
		"max_connections = 60",
		"shared_buffers = 16MB",
		"wal_level = replica",
		"max_wal_senders = 4",
	}
	if sync {
		conf = append(conf, "synchronous_commit = on", "synchronous_standby_names = '*'")
	} else {
		conf = append(conf, "synchronous_commit = off")
	}
	s.appendFile("postgresql.conf", conf...)
	s.appendFile("pg_hba.conf", "host all all "+s.subnet+" trust", "host replication all "+s.subnet+" trust")
	s.start()
	return s
}

// startStandby makes a streaming standby of s on host h (pg_basebackup
// -R) and starts it.
func (s *pgServer) startStandby(h *netHost) *pgServer {
	t := s.t
	t.Helper()
	sb := newPGServer(t, s.bin, h)
	hostsMust(t, sb.asPostgres("pg_basebackup", "-h", s.host.addr, "-p", "5432", "-U", "postgres",
		"-D", sb.data(), "-R", "-X", "stream", "-c", "fast", "--no-sync")...)
	sb.appendFile("postgresql.conf",
		"unix_socket_directories = '"+sb.dir+"'",
		// Copied from the primary: once promoted, the standby has no
		// standby of its own, and its commits would wait for ever.
		"synchronous_standby_names = ''")
	sb.start()
	return sb
}

// start starts the server and has t.Cleanup stop it (immediate mode),
// logging the end of its log if the test failed.
func (s *pgServer) start() {
	s.t.Helper()
	s.t.Cleanup(func() {
		if !s.stopped {
			if err := s.halt(); err != nil {
				s.t.Errorf("stop the server on %s (its postmaster was killed): %v", s.host.name, err)
			}
		}
		if s.t.Failed() {
			if b, err := os.ReadFile(s.logFile()); err == nil {
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				s.t.Logf("server on %s, end of its log:\n%s", s.host.name, strings.Join(lines[max(len(lines)-30, 0):], "\n"))
			}
		}
	})
	hostsMust(s.t, s.asPostgres("pg_ctl", "-D", s.data(), "-l", s.logFile(), "-w", "-t", "60", "-s", "start")...)
}

// halt stops the server at once (pg_ctl stop -m immediate), or kills its
// postmaster if that fails; it reports what went wrong.
func (s *pgServer) halt() error {
	s.stopped = true
	_, err := hostsCmd(s.asPostgres("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "-t", "30", "-s", "stop")...)
	if err == nil {
		return nil
	}
	if b, rerr := os.ReadFile(filepath.Join(s.data(), "postmaster.pid")); rerr == nil {
		if pid, aerr := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); aerr == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return err
}

// stop stops the server now, as a crash would (immediate mode).
func (s *pgServer) stop() {
	s.t.Helper()
	if err := s.halt(); err != nil {
		s.t.Fatal(err)
	}
}

// promote makes a standby a primary, and waits until it is one.
func (s *pgServer) promote() {
	s.t.Helper()
	hostsMust(s.t, s.asPostgres("pg_ctl", "-D", s.data(), "-w", "-t", "60", "-s", "promote")...)
}

// psql runs one statement on the server from the root namespace and
// returns its unaligned output.
func (s *pgServer) psql(sql string) (string, error) {
	out, err := hostsCmd(filepath.Join(s.bin, "psql"), "-X", "-A", "-t", "-h", s.host.addr, "-p", "5432",
		"-U", "postgres", "-d", "postgres", "-c", sql)
	return strings.TrimSpace(out), err
}

// waitSyncStandby waits until a standby streams from the server as its
// synchronous standby.
func (s *pgServer) waitSyncStandby() {
	s.t.Helper()
	eventually(s.t, 60*time.Second, "a synchronous standby streaming", func() (bool, string) {
		out, err := s.psql("SELECT state || ' ' || sync_state FROM pg_stat_replication")
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(strings.Split(out, "\n"), "streaming sync"), out
	})
}
