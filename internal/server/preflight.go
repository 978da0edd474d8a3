package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/redisstore"
)

// preflight keeps the last report of the Redis store's preflight (run at
// start and after each new connection), logs what changed, and exports
// each check's result.
type preflight struct {
	store *redisstore.Store
	also  []redisstore.Command
	log   *slog.Logger
	gauge *prometheus.GaugeVec

	mu   sync.Mutex
	last *redisstore.Report // nil: none has run
}

var preflightResults = []string{redisstore.ResultOK, redisstore.ResultWarn, redisstore.ResultFail, redisstore.ResultUnknown}

func newPreflight(store *redisstore.Store, also []redisstore.Command, log *slog.Logger, reg prometheus.Registerer) *preflight {
	p := &preflight{store: store, also: also, log: log,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_store_preflight",
			Help: "1 for each Redis preflight check's result (decide, eviction, persistence, commands; ok, warn, fail, unknown), as of the last preflight: at start and after each new connection.",
		}, []string{"check", "result"})}
	reg.MustRegister(p.gauge)
	return p
}

// run runs a preflight and records it; the error says it could ask
// nothing (Redis not reachable).
func (p *preflight) run(ctx context.Context) (redisstore.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := p.store.Preflight(ctx, p.also...)
	if err != nil {
		return r, err
	}
	p.record(r)
	return r, nil
}

// record keeps r and logs each check whose result changed: a warning or a
// failure as a WARN line naming the fix, the rest at INFO.
func (p *preflight) record(r redisstore.Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range r.Checks {
		for _, res := range preflightResults {
			v := 0.0
			if res == c.Result {
				v = 1
			}
			p.gauge.WithLabelValues(c.Name, res).Set(v)
		}
		if p.last != nil {
			if old, ok := p.last.Check(c.Name); ok && old == c {
				continue
			}
		}
		attrs := []any{"check", c.Name, "result", c.Result, "found", c.Detail, "server", r.Server, "user", r.User}
		switch c.Result {
		case redisstore.ResultWarn, redisstore.ResultFail:
			p.log.Warn("redis preflight: "+c.Name+" "+c.Result, append(attrs, "fix", c.Fix)...)
		default:
			p.log.Info("redis preflight: "+c.Name+" "+c.Result, attrs...)
		}
	}
	p.last = &r
}

// problems returns the last report's warnings and failures, each in a
// line for /readyz: what a public listener may say (the check and its
// result), and the details for the admin's.
func (p *preflight) problems() (failed bool, public, detail []string) {
	if p == nil {
		return false, nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return false, nil, nil
	}
	for _, c := range p.last.Checks {
		switch c.Result {
		case redisstore.ResultFail:
			failed = true
		case redisstore.ResultWarn:
		default:
			continue
		}
		if c.Name == "eviction" {
			public = append(public, fmt.Sprintf("%s: %s: %s", c.Name, c.Result, c.Detail))
		} else {
			public = append(public, fmt.Sprintf("%s: %s", c.Name, c.Result)) // the details name users and commands
		}
		detail = append(detail, fmt.Sprintf("%s: %s: %s (fix: %s)", c.Name, c.Result, c.Detail, c.Fix))
	}
	return failed, public, detail
}

// preflightEvery is how often the preflight runs besides at each new
// connection: a maxmemory-policy or an ACL changed on a live server is
// found within it. A variable for the tests.
var preflightEvery = time.Minute

// every runs the preflight every interval until ctx ends.
func (p *preflight) every(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.run(ctx)
		}
	}
}

// decideRefused says why a report's user cannot decide, or "".
func decideRefused(r redisstore.Report) string {
	var why []string
	for _, name := range []string{"decide", "commands"} {
		if c, ok := r.Check(name); ok && c.Result == redisstore.ResultFail {
			why = append(why, c.Detail+" (fix: "+c.Fix+")")
		}
	}
	return strings.Join(why, "; ")
}
