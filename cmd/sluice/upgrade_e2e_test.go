//go:build e2e

package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// formatFiles are the files that define what sluice keeps in Redis: its
// key names and, in the scripts, its state's layout.
var formatFiles = []string{":/redisstore/scripts", ":/redisstore/keys.go"}

// protocolFiles define the shard members' protocol.
var protocolFiles = []string{":/api/shardv1"}

// previousBuild builds `sluice` as it was before the last commit that
// changed files (formatFiles, protocolFiles), from git history, in a
// temporary directory. Without the history (a shallow clone, or no git) it
// skips, unless SLUICE_REQUIRE_HISTORY is set (CI sets it).
// SLUICE_PREVIOUS_COMMIT names another commit to build instead.
func previousBuild(t *testing.T, files []string) (bin, commit string) {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("SLUICE_REQUIRE_HISTORY") != "" {
		fail = t.Fatalf
	}
	out, err := exec.Command("git", append([]string{"log", "-n1", "--format=%H", "--"}, files...)...).Output()
	last := strings.TrimSpace(string(out))
	if err != nil || last == "" {
		fail("no git history here: %v", err)
	}
	parent, err := exec.Command("git", "rev-parse", "--verify", "-q", last+"^").Output()
	if err != nil {
		fail("the commit before %s is not in this clone's history (shallow?): %v", last, err)
	}
	commit = strings.TrimSpace(string(parent))
	if c := os.Getenv("SLUICE_PREVIOUS_COMMIT"); c != "" {
		commit = c // any release to try beside this one
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive `+commit+" | tar -x -C "+dir)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin = filepath.Join(dir, "sluice-previous")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./cmd/sluice")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", commit, err, out)
	}
	return bin, commit
}

// check sends one check of key under policy to p and reports it; ok is
// false when no answer came.
func check(p *proc, policy, key string) (r checkResp, ok bool) {
	body := fmt.Sprintf(`{"checks":[{"policy":%q,"key":%q}]}`, policy, key)
	resp, err := http.Post("http://"+p.http+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return r, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Results) != 1 {
		return r, false
	}
	return r, true
}

// The release before the last change of the store's format and this one,
// on one real redis-server: 64 callers split between them admit exactly
// each algorithm's limit, a key used on one has what is left of it on the
// other (an upgrade and a rollback keep what was used), and neither logs
// or counts a store error.
func TestUpgradeAndRollbackOnOneRedis(t *testing.T) {
	prev, commit := previousBuild(t, formatFiles)
	t.Logf("previous format: %s", commit)
	srv := redistest.Own(t) // the previous release knows no prefix parameter
	file := filepath.Join(t.TempDir(), "sluice.yaml")
	os.WriteFile(file, []byte("store:\n  type: redis\n  url: \""+srv.URL()+"\"\n"+sixPolicies("1000", false)), 0o644)
	old := startBinary(t, prev, nil, "-config", file)
	cur := start(t, nil, "-config", file)
	both := []*proc{old, cur}

	for _, alg := range algorithms {
		var admitted, answered atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				for range 24 {
					if r, ok := check(both[g%2], alg, "mixed"); ok {
						answered.Add(1)
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 1000 || answered.Load() != 64*24 {
			t.Errorf("%s: %d admitted of %d answered, the two releases together; want exactly 1000 of %d", alg, admitted.Load(), answered.Load(), 64*24)
		}
	}
	// What one release used, the other keeps: 400 used, then one more
	// leaves 599 (600 for a bucket that refilled one meanwhile).
	for _, step := range []struct {
		name     string
		use, see *proc
	}{{"upgrade", old, cur}, {"rollback", cur, old}} {
		for _, alg := range algorithms {
			for range 400 {
				check(step.use, alg, step.name)
			}
			r, ok := check(step.see, alg, step.name)
			if got := r.Results; !ok || !r.Allowed || got[0].Remaining != 599 && !(got[0].Remaining == 600 && strings.Contains("token_bucket leaky_bucket gcra", alg)) {
				t.Errorf("%s, %s: after 400 used on the other release: %+v; want allowed, 599 left", step.name, alg, r)
			}
		}
	}
	for _, p := range both {
		if out := p.out.String(); strings.Contains(out, "store failed") || strings.Contains(out, "level=ERROR") {
			t.Errorf("a release logged a store failure:\n%s", out)
		}
		if n := metric(t, p.http, `sluice_store_calls_total{operation="take",result="error"}`); n != 0 {
			t.Errorf("%v store errors counted", n)
		}
	}
}
