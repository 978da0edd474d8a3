package httplimit

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/internal/sample"
)

// sampler logs at most perSecond lines a second per policy, and says in
// each line how many it held back since the last: never one line per 429.
type sampler struct {
	log *slog.Logger
	s   *sample.Sampler
}

func newSampler(log *slog.Logger, perSecond int64) *sampler {
	return &sampler{log: log, s: sample.New(perSecond)}
}

// note logs msg for policy unless the policy is over its rate of lines.
func (s *sampler) note(ctx context.Context, level slog.Level, policy, msg string, attrs ...slog.Attr) {
	if s.log == nil || !s.log.Enabled(ctx, level) {
		return
	}
	if ok, held := s.s.Allow(policy); ok {
		attrs = append(attrs, slog.String("policy", policy), slog.Int64("suppressed", held))
		s.log.LogAttrs(ctx, level, msg, attrs...)
	}
}
