package httplimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

// sampler logs denials at most perSecond times a second per policy, and
// says in each line how many it suppressed since the last: never one line
// per 429. It rate-limits with sluice itself.
type sampler struct {
	log        *slog.Logger
	limiter    *sluice.Limiter
	mu         sync.Mutex
	suppressed map[string]*atomic.Int64
}

func newSampler(log *slog.Logger, perSecond int64) *sampler {
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{Shards: 1, MaxKeys: 10_000}),
		sluice.Limit{Algorithm: sluice.TokenBucket, Rate: perSecond, Period: time.Second}, sluice.LimiterOptions{})
	return &sampler{log: log, limiter: l, suppressed: map[string]*atomic.Int64{}}
}

func (s *sampler) counter(policy string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.suppressed[policy]
	if c == nil {
		c = new(atomic.Int64)
		s.suppressed[policy] = c
	}
	return c
}

// note logs msg for policy unless the policy is over its rate of lines.
func (s *sampler) note(ctx context.Context, level slog.Level, policy, msg string, attrs ...slog.Attr) {
	if s.log == nil || !s.log.Enabled(ctx, level) {
		return
	}
	c := s.counter(policy)
	if d, _ := s.limiter.Allow(ctx, policy); !d.Allowed {
		c.Add(1)
		return
	}
	attrs = append(attrs, slog.String("policy", policy), slog.Int64("suppressed", c.Swap(0)))
	s.log.LogAttrs(ctx, level, msg, attrs...)
}
