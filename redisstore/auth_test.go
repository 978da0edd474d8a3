package redisstore_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// A password rotated in its file is used without a restart, as an
// operator rotates an ACL user's: the new password added, the file
// rewritten, the old one removed, the connections broken. A file left
// unreadable meanwhile keeps the last password read, logged once, and
// once more when it can be read again.
func TestPasswordFileRotatedWithoutRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("rotates a password file through its steps")
	}
	srv := redistest.Own(t)
	srv.Do("ACL", "SETUSER", "limiter", "on", ">first", "~*", "&*", "+@all")
	file := filepath.Join(t.TempDir(), "password")
	write := func(contents string) { t.Helper(); swapFile(t, file, []byte(contents)) }
	write("first\n")
	var logged logbuf.Buffer
	store, err := redisstore.Open("redis://limiter@"+srv.Addr+"?password_file="+url.QueryEscape(file), redisstore.Options{
		Prefix: uniquePrefix(t), ReconnectInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	until := func(what string, want func(error) bool) error { t.Helper(); return takeUntil(t, store, what, want) }
	until("the first password", decided)

	rotate(t, file, "first", "second", srv)
	until("the password rotated in its file, the old one removed", decided)

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	srv.Do("CLIENT", "KILL", "USER", "limiter")
	until("the file gone, the password where it was", decided)

	srv.Do("ACL", "SETUSER", "limiter", ">third", "<second")
	srv.Do("CLIENT", "KILL", "USER", "limiter")
	until("the password changed, the file not yet written", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "WRONGPASS") // a new connection's, not the broken one's
	})
	write("third")
	until("the file written again", decided)
	if log := logged.String(); strings.Count(log, "redis password_file could not be read again") != 1 || strings.Count(log, "redis password_file read again") != 1 {
		t.Fatalf("want one warning of the unreadable file and one line of its end; logged:\n%s", log)
	}
	if store.FileErrors() == 0 {
		t.Fatal("the reads of the removed file were not counted (FileErrors)")
	}
	if strings.Contains(logged.String(), "second") {
		t.Fatalf("a password was logged:\n%s", logged.String())
	}
}

// rotate moves the ACL user limiter of servers from password from to
// password to as an operator does: the new one added, written to file,
// the old one removed, and the connections that used it broken.
func rotate(t *testing.T, file, from, to string, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		s.Do("ACL", "SETUSER", "limiter", ">"+to)
	}
	swapFile(t, file, []byte(to+"\n"))
	for _, s := range servers {
		s.Do("ACL", "SETUSER", "limiter", "<"+from)
		s.Do("CLIENT", "KILL", "USER", "limiter")
	}
}

// A password file goes with a user in the URL, in place of its password,
// and a sentinel password file with Sentinel, in place of
// sentinel_password; a file that cannot be read at Open is its error.
func TestPasswordFileRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ url, want string }{
		{"redis://u:pass@127.0.0.1:1?password_file=" + url.QueryEscape(file), "give one"},
		{"redis://127.0.0.1:1?password_file=/nonexistent", "password_file"},
		{"redis://127.0.0.1:1?password_file=" + url.QueryEscape(empty), "is empty"},
		{"redis-sentinel://127.0.0.1:1/m?sentinel_password=secret&sentinel_password_file=" + url.QueryEscape(file), "give one"},
		{"redis://127.0.0.1:1?sentinel_password_file=" + url.QueryEscape(file), "are for Sentinel"},
		{"redis-sentinel://127.0.0.1:1/m?sentinel_password_file=/nonexistent", "sentinel_password_file"},
		{"redis-sentinel://127.0.0.1:1/m?sentinel_password_file=" + url.QueryEscape(empty), "is empty"},
	} {
		if _, err := redisstore.Open(tt.url, redisstore.Options{}); err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %v; want one saying %q, without the password", tt.url, err, tt.want)
		}
	}
}

// swapFile writes contents to path whole, through a file renamed over it,
// as a Kubernetes Secret mounted as a volume is updated.
func swapFile(t *testing.T, path string, contents []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", contents, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// takeUntil takes one from a key of store until want says the answer
// (its error) is the one awaited, and returns that error; what names the
// awaited event when 30 s pass without it.
func takeUntil(t *testing.T, store *redisstore.Store, what string, want func(error) bool) error {
	t.Helper()
	limit := sluice.Limit{Rate: 1_000_000, Period: time.Hour}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // polling for the event
		_, err := store.Take(context.Background(), sluice.Request{Key: "k", Limit: limit, Cost: 1})
		if want(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: 30 s on, the last take's error: %v", what, err)
		}
	}
}

// decided is takeUntil's want for an answer Redis decided.
func decided(err error) bool { return err == nil }
