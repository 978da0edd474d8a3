package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// What a Redis restart does to counts, by persistence setting: without
// persistence a killed and restarted Redis forgets them (an exhausted key
// is allowed again); with AOF everysec, a kill a second after the last
// write loses nothing. docs/operations.md's guidance rests on these.
func TestRestartAndPersistence(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an fsync and restarts Redis")
	}
	redistest.HourAhead()
	for _, tt := range []struct {
		name string
		args []string
		kept bool
	}{
		{"no persistence", nil, false},
		{"aof everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.StandaloneWith(t, tt.args...)
			s, err := redisstore.Open(srv.URL(), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			req := sluice.Request{Key: "k", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}, Cost: 10}
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("first take: %+v, %v", d, err)
			}
			time.Sleep(1200 * time.Millisecond) // one fsync of everysec
			srv.Kill()
			srv.Restart()
			req.Cost = 1
			var d sluice.Decision
			for deadline := time.Now().Add(5 * time.Second); ; {
				if d, err = s.Take(ctx, req); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no answer after the restart: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if kept := !d.Allowed; kept != tt.kept {
				t.Fatalf("after a kill and restart: %+v; want the count kept: %v", d, tt.kept)
			}
		})
	}
}
