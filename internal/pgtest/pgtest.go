// Package pgtest starts throw-away PostgreSQL servers for tests: initdb and
// pg_ctl from the postgresql package (Debian's /usr/lib/postgresql/*/bin,
// or PATH), run as the postgres user when the tests run as root, listening
// on a free loopback port with the data and the Unix socket in a
// temporary directory.
//
// A test binary shares one server (Shared), and each test works in a
// database of its own (Server.DB); Main stops the shared server when the
// tests end. Tests that restart or stop the server start one of their own
// (Own). SLUICE_POSTGRES_URL points Shared at an existing server instead
// (its user must be allowed to create databases). Without the postgres
// binaries, tests skip with a message, unless SLUICE_REQUIRE_POSTGRES=1,
// where they fail.
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/freeport"
)

// Server is one PostgreSQL server: started by this package, or the one
// SLUICE_POSTGRES_URL names.
type Server struct {
	url  string // the server's postgres database, as its superuser
	bin  string // the directory of initdb and pg_ctl; "" for an external server
	dir  string // data in dir/data, socket in dir, log in dir/log
	cred *syscall.Credential
}

// External returns SLUICE_POSTGRES_URL, or "".
func External() string { return os.Getenv("SLUICE_POSTGRES_URL") }

var shared struct {
	once sync.Once
	s    *Server
	err  error
	skip string
}

// Shared returns the test binary's server, started on first use, or the
// one SLUICE_POSTGRES_URL names. Call Main from TestMain so that it is
// stopped when the tests end.
func Shared(t testing.TB) *Server {
	t.Helper()
	if u := External(); u != "" {
		return &Server{url: u}
	}
	bin := binDir(t)
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "pgtest-")
		if err != nil {
			shared.err = err
			return
		}
		shared.s, shared.err = start(t, bin, dir)
		if shared.err != nil {
			os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	return shared.s
}

// Main runs the tests and then stops the shared server, if one started.
// Use it as TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		shared.s.stop()
	}
	os.Exit(code)
}

// Own starts a server of the test's own, even with SLUICE_POSTGRES_URL
// set, for tests that restart or stop it; it is stopped when t ends.
func Own(t testing.TB) *Server {
	t.Helper()
	bin := binDir(t)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	s, err := start(t, bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.stop)
	return s
}

// binDir returns the directory holding initdb and pg_ctl, skipping or
// failing t when there is none.
func binDir(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d
		}
	}
	if os.Getenv("SLUICE_REQUIRE_POSTGRES") == "1" {
		t.Fatal("pgtest: initdb and pg_ctl not found (PATH, /usr/lib/postgresql/*/bin) and SLUICE_REQUIRE_POSTGRES=1")
	}
	t.Skip("pgtest: initdb and pg_ctl not found (PATH, /usr/lib/postgresql/*/bin): skipping (install postgresql, or set SLUICE_POSTGRES_URL)")
	return ""
}

// version is the major version in a path /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// start initialises a cluster in dir and starts it on a free port.
func start(t testing.TB, bin, dir string) (*Server, error) {
	s := &Server{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		// postgres refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user to run postgres as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	port := freeport.Port(t)
	conf := fmt.Sprintf("\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nfull_page_writes = off\nmax_connections = 200\nshared_buffers = 32MB\n", port, dir)
	f, err := os.OpenFile(filepath.Join(s.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return nil, err
	}
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.pgctl("start"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs a postgres binary as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// pgctl runs pg_ctl with op (start, stop, restart) and waits for it.
func (s *Server) pgctl(op string, args ...string) error {
	out, err := s.run("pg_ctl", append([]string{op, "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60"}, args...)...)
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl %s: %v: %s\n%s", op, err, out, log)
	}
	return nil
}

func (s *Server) stop() {
	if s.bin == "" {
		return
	}
	s.pgctl("stop", "-m", "immediate")
	os.RemoveAll(s.dir)
}

// Restart restarts the server with pg_ctl restart -m mode ("fast",
// "immediate", "smart") and waits until it accepts connections again.
func (s *Server) Restart(t testing.TB, mode string) {
	t.Helper()
	if s.bin == "" {
		t.Skip("pgtest: cannot restart an external server")
	}
	if err := s.pgctl("restart", "-m", mode); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// URL returns the URL of the server's postgres database, as a superuser.
func (s *Server) URL() string { return s.url }

var (
	run = strconv.FormatUint(rand.Uint64(), 36)
	dbs atomic.Int64
)

// DB creates a database of t's own and returns its URL; it is dropped
// when t ends.
func (s *Server) DB(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("sluicetest_%s_%d", run, dbs.Add(1))
	s.Exec(t, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, s.url); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Exec runs sql on the server's postgres database, failing t on an error.
func (s *Server) Exec(t testing.TB, sql string) {
	t.Helper()
	ExecOn(t, s.url, sql)
}

// ExecOn runs sql on the database of url, failing t on an error.
func ExecOn(t testing.TB, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("pgtest: %s: %v", strings.SplitN(sql, "\n", 2)[0], err)
	}
}

// CPU returns the processor time the server's processes have used so
// far, from /proc: the postmaster's own, its children's (the backends
// among them) while they run, and, counted in the postmaster's, its
// children's that have ended. It skips t for an external server.
func (s *Server) CPU(t testing.TB) time.Duration {
	t.Helper()
	if s.bin == "" {
		t.Skip("pgtest: the CPU of an external server is not known")
	}
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ... utime stime cutime cstime: fields 14
		// to 17, counted after the command's closing parenthesis.
		line := string(b)
		i := strings.LastIndexByte(line, ')')
		f := strings.Fields(line[i+1:])
		self := strings.Fields(line)[0]
		if len(f) < 15 || (self != pid && f[1] != pid) {
			continue
		}
		fields := f[11:13]
		if self == pid {
			fields = f[11:15]
		}
		for _, v := range fields {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ, 100 on Linux
}
