package redisstore_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/storetest"
)

var prefixes atomic.Int64

// uniquePrefix isolates each store on a shared server.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("sluicetest:%d:%s:", prefixes.Add(1), strings.ReplaceAll(t.Name(), "/", "."))
}

func client(t testing.TB, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func addrsOf(nodes []*redistest.Server) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Addr)
	}
	return out
}

func TestConformanceStandalone(t *testing.T) {
	srv := redistest.Standalone(t)
	c := client(t, srv.Addr)
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	assertEveryKeyHasTTL(t, srv)
}

func TestConformanceCluster(t *testing.T) {
	nodes := redistest.Cluster(t)
	c := client(t, addrsOf(nodes)...)
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %v, want cluster", c.Mode())
	}
	storetest.Run(t, func(t *testing.T) sluice.Store {
		return redisstore.New(c, redisstore.Options{Prefix: uniquePrefix(t)})
	})
	for _, n := range nodes {
		assertEveryKeyHasTTL(t, n)
	}
}

// assertEveryKeyHasTTL fails for any sluice key left without a TTL.
func assertEveryKeyHasTTL(t *testing.T, srv *redistest.Server) {
	t.Helper()
	keys := strings.Fields(srv.Do("--scan", "--pattern", "sluicetest:*"))
	for _, k := range keys {
		if ttl := srv.Do("PTTL", k); ttl == "-1" {
			t.Errorf("key %q has no TTL", k)
		}
	}
	t.Logf("%d keys checked for a TTL on %s", len(keys), srv.Addr)
}
