package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/localsync"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/shard"
)

// BenchmarkDistributed compares the Redis store with local-sync on the same
// redis-server: checks/s and latency at 64 callers on 10k keys, and, for
// local-sync at sync intervals of 10ms, 100ms and 1s, the over- and
// under-admission of 3 instances on one hot key offered twice its limit
// for 3 s (reported as over-% and admitted-% of what the limit allows).
func BenchmarkDistributed(b *testing.B) {
	srv := redistest.Standalone(b)
	newClient := func() rueidis.Client { return rueidisClient(b, srv.Addr) }
	ctx := context.Background()
	limit := benchLimit
	// 64 callers, and 256: the Redis store is at its ceiling (Redis's one
	// thread) by 64; forwarding between shard instances needs more
	// concurrency to fill its batches.
	for _, callers := range []int{64, 256} {
		b.Run(fmt.Sprintf("redis/callers=%d", callers), func(b *testing.B) {
			s := redisstore.New(newClient(), redisstore.Options{Prefix: "dist:redis:"})
			drive(b, callers, func(key string) error {
				_, err := s.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1})
				return err
			})
		})
		b.Run(fmt.Sprintf("local-sync-100ms/callers=%d", callers), func(b *testing.B) {
			s, _ := localsync.New(localsync.Options{Shared: redisstore.New(newClient(), redisstore.Options{Prefix: "dist:ls:"}), Instances: 3})
			defer s.Close()
			drive(b, callers, func(key string) error {
				_, err := s.Take(ctx, sluice.Request{Key: key, Limit: limit, Cost: 1})
				return err
			})
		})
		b.Run(fmt.Sprintf("shard-3-instances/callers=%d", callers), func(b *testing.B) {
			nodes := shardNodes(b, 3)
			driveShard(b, callers, func(uint64) *shard.Store { return nodes[0] }, nodes, limit)
		})
		b.Run(fmt.Sprintf("shard-3-instances-spread/callers=%d", callers), func(b *testing.B) {
			// Checks spread round-robin over the three, as behind a load
			// balancer or from three applications each with its own sluice.
			nodes := shardNodes(b, 3)
			driveShard(b, callers, func(i uint64) *shard.Store { return nodes[i%3] }, nodes, limit)
		})
	}
	for _, interval := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprintf("local-sync-%v/hot-key-2x", interval), func(b *testing.B) {
			hot := sluice.Limit{Rate: 300, Period: time.Second}
			// One 3-second run whatever b.N: the figure is the run, not a rate.
			over, admitted := hotKey(b, newClient, hot, interval, 3*time.Second)
			b.ReportMetric(over, "over-%")
			b.ReportMetric(admitted, "admitted-%")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// driveShard drives callers on shard instances, the i-th check entering
// at entry(i), and reports the share of checks forwarded to an owner.
func driveShard(b *testing.B, callers int, entry func(i uint64) *shard.Store, nodes []*shard.Store, limit sluice.Limit) {
	var n atomic.Uint64
	drive(b, callers, func(key string) error {
		_, err := entry(n.Add(1)).Take(context.Background(), sluice.Request{Key: key, Limit: limit, Cost: 1})
		return err
	})
	var fwd int64
	for _, n := range nodes {
		fwd += n.Forwarded()
	}
	b.ReportMetric(float64(fwd)/float64(b.N)*100, "forwarded-%")
}

var hotRun atomic.Int64

// hotKey runs 3 local-sync instances, each offering 2/3 of twice the limit,
// and returns the over-admission and the admitted share of what the limit
// allows, in percent.
func hotKey(b *testing.B, newClient func() rueidis.Client, limit sluice.Limit, interval, d time.Duration) (over, admitted float64) {
	prefix := fmt.Sprintf("dist:hot:%d:", hotRun.Add(1))
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	gap := time.Duration(float64(limit.Period) / float64(limit.Rate) * 3 / 2) // each instance offers 2/3 of 2x
	for range 3 {
		s, err := localsync.New(localsync.Options{Shared: redisstore.New(newClient(), redisstore.Options{Prefix: prefix}), Interval: interval, Instances: 3})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			tick := time.NewTicker(gap)
			defer tick.Stop()
			for time.Since(start) < d {
				<-tick.C
				if dec, err := s.Take(context.Background(), sluice.Request{Key: "hot", Limit: limit, Cost: 1}); err == nil && dec.Allowed {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	allowed := float64(limit.Capacity()) + float64(limit.Rate)*time.Since(start).Seconds()
	got := float64(n.Load())
	return max(got-allowed, 0) / float64(limit.Rate) * 100, got / allowed * 100
}

// shardNodes starts n in-process shard instances on loopback gRPC and
// returns their stores once every ring holds every member.
func shardNodes(b *testing.B, n int) []*shard.Store {
	var lis []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lis, addrs = append(lis, l), append(addrs, l.Addr().String())
	}
	var stores []*shard.Store
	for i := range n {
		local := memstore.New(memstore.Options{})
		srv := grpc.NewServer()
		shard.Register(srv, local, shard.Auth{})
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis[i])
		s, err := shard.New(shard.Options{Self: addrs[i], Local: local, Interval: 100 * time.Millisecond,
			Members: shard.Static(addrs[i], addrs, 50*time.Millisecond), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(); srv.Stop() })
		stores = append(stores, s)
	}
	for _, s := range stores {
		for len(s.Members()) != n {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return stores
}
