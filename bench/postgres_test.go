package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/pgstore"
)

// BenchmarkPostgres compares sluice's PostgreSQL store with node's
// rate-limiter-flexible (RateLimiterPostgres, the peer with a PostgreSQL
// store) on one PostgreSQL server of the benchmark's own: 64 callers over
// 10,000 keys and on one hot key, on a limit no caller reaches. Each
// reports checks/s and the PostgreSQL server's CPU per check (its
// processes' user and system time, from /proc). The peer runs when node
// is on PATH and its modules are installed (cd bench/pgpeer && npm
// install).
func BenchmarkPostgres(b *testing.B) {
	srv := pgtest.Own(b)
	url := srv.DB(b)
	ctx := context.Background()
	for _, keys := range []int{10000, 1} {
		name := "10k-keys"
		if keys == 1 {
			name = "hot-key"
		}
		b.Run("sluice/"+name, func(b *testing.B) {
			s, err := pgstore.Open(ctx, url, pgstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 40, Period: time.Hour}
			ks := keySets()[1].keys[:keys]
			cpu := srv.CPU(b)
			drive(b, 64, func(key string) error {
				if keys == 1 {
					key = ks[0]
				}
				_, err := s.Take(ctx, sluice.Request{Key: key, Limit: l, Cost: 1})
				return err
			})
			b.ReportMetric(float64((srv.CPU(b)-cpu).Microseconds())/float64(b.N), "pg-cpu-µs/check")
		})
		b.Run("rate-limiter-flexible/"+name, func(b *testing.B) {
			node, err := exec.LookPath("node")
			if err != nil {
				b.Skip("node is not on PATH")
			}
			if _, err := os.Stat(filepath.Join("pgpeer", "node_modules", "rate-limiter-flexible")); err != nil {
				b.Skip("rate-limiter-flexible is not installed: cd bench/pgpeer && npm install")
			}
			cpu := srv.CPU(b)
			out, err := exec.Command(node, "pgpeer/rlf.js", url, "64", strconv.Itoa(b.N), strconv.Itoa(keys)).CombinedOutput()
			if err != nil {
				b.Fatalf("rlf.js: %v: %s", err, out)
			}
			took, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
			if err != nil {
				b.Fatalf("rlf.js: %s", out)
			}
			b.ReportMetric(float64(b.N)/took, "checks/s")
			b.ReportMetric(float64((srv.CPU(b)-cpu).Microseconds())/float64(b.N), "pg-cpu-µs/check")
			b.ReportMetric(0, "ns/op")
		})
	}
}
