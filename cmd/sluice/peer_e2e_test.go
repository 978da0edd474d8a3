//go:build e2e

package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/freeport"
	"github.com/sluicehq/sluice/shard"
)

// A second process that is not a member (testdata/outsider) reaches a
// member's peer listener, with no secret and with a guessed one: its reset
// of a held client's key, its charges of a victim's key (forced, as a
// failover, as a hand-off), its end of a hand-off and its forged leave are
// all refused and counted, and nothing changes: the held client is still
// held, the victim's first request finds its whole limit, and both
// members stay in the ring.
func TestShardPeerListenerRefusesAnOutsider(t *testing.T) {
	c := &shardCluster{t: t, file: filepath.Join(t.TempDir(), "shard.yaml"), grpcs: []string{freeport.Addr(t), freeport.Addr(t)}, procs: make([]*proc, 2)}
	os.WriteFile(c.file, []byte(shardConfig(t, c.grpcs, "3/1h")), 0o644)
	all := c.running(2)
	ring := shard.NewRing(c.grpcs, 128, nil)
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		if k := "k" + strings.Repeat("x", i); ring.Owner("p\x00"+k) == c.grpcs[1] {
			keys = append(keys, k)
		}
	}
	held, victim := keys[0], keys[1]
	front := c.procs[0].http
	for i := range 4 {
		if _, r := postCheck(t, front, "p", held); r.Allowed != (i < 3) {
			t.Fatalf("check %d of 3/1h through the other member: allowed %v", i+1, r.Allowed)
		}
	}
	outsider := filepath.Join(t.TempDir(), "outsider")
	if out, err := exec.Command("go", "build", "-o", outsider, "./testdata/outsider").CombinedOutput(); err != nil {
		t.Fatalf("building the outsider: %v\n%s", err, out)
	}
	for _, secret := range []string{"", "a-guessed-secret"} {
		out, err := exec.Command(outsider, "-addr", c.grpcs[1], "-policy", "p", "-held", held, "-victim", victim, "-member", c.grpcs[0], "-secret", secret).CombinedOutput()
		if err != nil || strings.Count(string(out), "refused: ") != 6 {
			t.Errorf("outsider with secret %q: %v\n%s", secret, err, out)
		}
	}
	for series, want := range map[string]float64{
		`sluice_listener_refused_total{listener="peer",reason="no_secret"}`:  6,
		`sluice_listener_refused_total{listener="peer",reason="bad_secret"}`: 6,
	} {
		if got := metric(t, c.procs[1].http, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}
	if _, r := postCheck(t, front, "p", held); r.Allowed {
		t.Error("the held client was reset by the outsider")
	}
	if _, r := postCheck(t, front, "p", victim); !r.Allowed || len(r.Results) != 1 || r.Results[0].Remaining != 2 {
		t.Errorf("the victim's first request: %+v; want allowed with 2 left", r)
	}
	for i, p := range c.procs {
		if strings.Contains(p.out.String(), "a member left") {
			t.Errorf("member %d dropped a member on the outsider's word:\n%s", i, p.out)
		}
	}
	c.sees(all, all)
}
