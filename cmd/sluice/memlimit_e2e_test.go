//go:build e2e

package main_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// memoryCgroup makes a memory cgroup of limit bytes below this process's
// own (cgroup v1's memory hierarchy, or v2's) and returns the file a
// process writes its PID to to join it, and a function that sets its
// limit; or skips the test where this process may not make one (not
// root, a read-only hierarchy).
func memoryCgroup(t *testing.T, limit int64) (procs string, setLimit func(int64) error) {
	t.Helper()
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup:", err)
	}
	defer f.Close()
	var dir, limitFile string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes"
		case parts[0] == "0" && dir == "":
			dir, limitFile = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max"
		}
	}
	cg := filepath.Join(dir, fmt.Sprintf("sluice-memlimit-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Skip("cannot make a memory cgroup:", err)
	}
	t.Cleanup(func() { os.Remove(cg) }) // once its process has exited (cleanups run last-in first-out)
	setLimit = func(limit int64) error {
		return os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644)
	}
	if err := setLimit(limit); err != nil {
		t.Skip("cannot limit a memory cgroup's memory:", err)
	}
	return filepath.Join(cg, "cgroup.procs"), setLimit
}

// inCgroup returns a script that runs sluice in a memory cgroup of limit
// bytes: the process joins it before sluice starts, as a container's
// process is in its cgroup from the start.
func inCgroup(t *testing.T, limit int64) (wrapper string, setLimit func(int64) error) {
	t.Helper()
	procs, setLimit := memoryCgroup(t, limit)
	wrapper = filepath.Join(t.TempDir(), "sluice")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s && exec %s \"$@\"\n", procs, binary)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, setLimit
}

// In a container with a memory limit, sluice serve limits the Go
// runtime's memory to 90% of it, so that the collector runs before the
// container is killed, and follows the container's limit when it
// changes; a GOMEMLIMIT of its environment wins.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	wrapper, setLimit := inCgroup(t, 256<<20)
	for _, c := range []struct {
		name string
		env  []string
		want float64
		from string
	}{
		{"from the container", []string{"GOMEMLIMIT="}, 241_591_910, "container"}, // 90% of 256 MiB, in whole bytes
		{"GOMEMLIMIT set", []string{"GOMEMLIMIT=100MiB"}, 100 << 20, "GOMEMLIMIT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startBinary(t, wrapper, c.env)
			if got := metric(t, p.http, "go_gc_gomemlimit_bytes"); got != c.want {
				t.Errorf("go_gc_gomemlimit_bytes %v, want %v", got, c.want)
			}
			if log := fmt.Sprintf(`msg="memory limit" bytes=%d from=%s`, int64(c.want), c.from); !strings.Contains(p.out.String(), log) {
				t.Errorf("no %s in the log:\n%s", log, p.out)
			}
		})
	}
	t.Run("the container resized", func(t *testing.T) {
		p := startBinary(t, wrapper, []string{"GOMEMLIMIT="})
		if err := setLimit(192 << 20); err != nil {
			t.Fatal(err)
		}
		// Read again within memoryRefresh (10 s): wait for the line that
		// follows the change (the runtime's limit is set before it is
		// logged), then read the limit.
		const want = 181_193_932 // 90% of 192 MiB, in whole bytes
		log := fmt.Sprintf(`msg="memory limit" bytes=%d from=container`, want)
		guard := time.After(time.Minute) // six refreshes: a guard against hanging, the line decides
		for !strings.Contains(p.out.String(), log) {
			select {
			case <-p.exited:
				t.Fatalf("sluice exited (%v)", p.exitErr)
			case <-guard:
				t.Fatalf("no %s a minute after the container was resized:\n%s", log, p.out)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if got := metric(t, p.http, "go_gc_gomemlimit_bytes"); got != want {
			t.Errorf("go_gc_gomemlimit_bytes %v after %s, want %v", got, log, float64(want))
		}
	})
}

// A memory store filled to its max_bytes in a container whose limit is
// above what it holds but below twice that (the heap Go's collector would
// let it reach) keeps serving: the runtime's limit makes the collector
// run before the container's kills the process.
func TestFullMemoryStoreFitsItsContainer(t *testing.T) {
	const limit, maxBytes = 160 << 20, 64 << 20
	wrapper, _ := inCgroup(t, limit)
	file := writeConfig(t, fmt.Sprintf("store:\n  max_bytes: %d\npolicies:\n  - name: p\n    limit: 10/1h\n    key: header:X-Key\n", maxBytes))
	p := startBinary(t, wrapper, []string{"GOMEMLIMIT="}, "-config", file)
	// Twice the keys max_bytes holds, 100 a request, from 4 clients.
	const keys, perRequest, clients = 1_400_000, 100, 4
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			var body strings.Builder
			for r := c; r*perRequest < keys; r += clients {
				body.Reset()
				body.WriteString(`{"checks":[`)
				for i := range perRequest {
					if i > 0 {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"policy":"p","key":"client-%d"}`, r*perRequest+i)
				}
				body.WriteString(`]}`)
				resp, err := http.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(body.String()))
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", r, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("request %d: status %d", r, resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	select {
	case <-p.exited:
		t.Fatalf("sluice exited (%v)", p.exitErr)
	default:
	}
	if n := metric(t, p.http, "sluice_memstore_live_evictions_total"); n == 0 {
		t.Errorf("no key evicted: the store never filled (%v bytes held)", metric(t, p.http, "sluice_memstore_bytes"))
	}
}
