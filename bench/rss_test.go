package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/memstore"
)

// rssChild is the environment variable that makes the test binary fill a
// store and report, in a process of its own (see BenchmarkRSSPerKey).
const rssChild = "SLUICE_BENCH_RSS_KEYS"

func TestMain(m *testing.M) {
	if n := os.Getenv(rssChild); n != "" {
		var keys int
		fmt.Sscan(n, &keys)
		fillAndReport(keys)
		return
	}
	if os.Getenv(spinChild) != "" {
		spin()
	}
	if kind := os.Getenv(rlsServerChild); kind != "" {
		serveRLSChild(kind)
		return
	}
	os.Exit(m.Run())
}

// fillAndReport fills a memory store with the default MaxKeys of GCRA
// keys of 14-byte names and prints the heap and the process's RSS per key.
func fillAndReport(keys int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss0 := rss()
	s := memstore.New(memstore.Options{})
	limit := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour}
	ctx := context.Background()
	for i := range keys {
		s.Take(ctx, sluice.Request{Key: fmt.Sprintf("user:%09d", i), Limit: limit, Cost: 1})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	fmt.Printf("%d %.1f %.1f\n", s.Len(), float64(after.HeapAlloc-before.HeapAlloc)/float64(keys), float64(rss()-rss0)/float64(keys))
	runtime.KeepAlive(s)
}

// rss returns the process's resident set in bytes.
func rss() int64 {
	m, _ := proc.Memory(os.Getpid())
	return m.Total
}

// BenchmarkRSSPerKey fills a memory store with the default settings, at
// 1M keys and at its default MaxKeys (4M), each in a fresh process (this
// binary, run again), and reports the heap and the RSS per key: what
// memory a key costs, garbage collector's headroom included.
//
//	cd bench && go test -run '^$' -bench RSSPerKey -count 3 .
func BenchmarkRSSPerKey(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("needs /proc to read RSS")
	}
	for _, keys := range []int{1_000_000, 4_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			var held int
			var heap, res float64
			for range b.N {
				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), fmt.Sprint(rssChild, "=", keys))
				out, err := cmd.Output()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := fmt.Sscan(string(out), &held, &heap, &res); err != nil {
					b.Fatalf("%q: %v", out, err)
				}
			}
			b.ReportMetric(heap, "heap-B/key")
			b.ReportMetric(res, "rss-B/key")
			b.ReportMetric(float64(held), "keys-held")
			b.ReportMetric(0, "ns/op")
		})
	}
}
