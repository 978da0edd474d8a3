package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkOneGoroutine prices one decision made by one goroutine, every
// library on the same keys and limits in the same run: sluice's memory
// store (GCRA, its default), sethvargo/go-limiter's memory store (token
// buckets) and x/time/rate's Limiter, one per key in a map under a mutex
// (see limiters); and sluice-TakeInto, the memory store's TakeInto with
// the goroutine's one Request and Decision reused, which no other
// benchmark can share.
// A limit of 100/1s is used up first, so every call is denied but for
// what it refills during the run; the other two never deny. Run with -cpu 1:
//
//	cd bench && go test -run '^$' -bench OneGoroutine -cpu 1 -count 5 .
func BenchmarkOneGoroutine(b *testing.B) {
	limits := []struct {
		name   string
		rate   int64
		period time.Duration
		allow  bool
	}{
		{"100per1s-denied", 100, time.Second, false},
		{"999999937per1h", 999_999_937, time.Hour, true},
		{"1e9per1s", 1_000_000_000, time.Second, true},
	}
	for _, lm := range limits {
		limit := sluice.Limit{Rate: lm.rate, Period: lm.period}
		for _, ks := range keySets()[:2] {
			for _, lib := range append(limiters[:len(limiters):len(limiters)], sluiceTakeInto) {
				b.Run(fmt.Sprintf("%s/%s/%s", lib.name, lm.name, ks.name), func(b *testing.B) {
					oneGoroutine(b, ks.keys, lm.allow, lib.new(b, limit))
				})
			}
		}
	}
}

// oneGoroutine makes every key exist (and, for a limit that denies, used
// up), then times take over the keys in turn from this goroutine. It
// reports the share of calls allowed: 0 or 100 but for what the limit
// refills during the run, or a library that decides otherwise.
func oneGoroutine(b *testing.B, ks []string, allow bool, take func(key string) (bool, error)) {
	decide := func(key string) bool {
		ok, err := take(key)
		if err != nil {
			b.Fatal(err)
		}
		return ok
	}
	for _, k := range ks {
		for decide(k) && !allow {
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	allowed := 0
	for i := range b.N {
		if decide(ks[i%len(ks)]) {
			allowed++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(allowed)/float64(b.N)*100, "allowed-%")
}

// sluiceTakeInto is the memory store deciding into one Request and one
// Decision that its caller keeps: for one goroutine only.
var sluiceTakeInto = limiter{"sluice-TakeInto", func(_ *testing.B, limit sluice.Limit) func(string) (bool, error) {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	req := sluice.Request{Limit: limit, Cost: 1}
	var d sluice.Decision
	return func(key string) (bool, error) {
		req.Key = key
		err := s.TakeInto(ctx, &req, &d)
		return d.Allowed, err
	}
}}
