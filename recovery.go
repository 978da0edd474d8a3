package sluice

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// How an outage ends exactly. Two things would otherwise make the end of
// an outage admit more than a limit allows:
//
//   - An open breaker probes the store only when a check arrives, so after
//     a quiet recovery the first burst is decided by the stand-in. While
//     the breaker is open, a prober goroutine probes the store itself
//     after each backoff (a peek of one key), so a store that returns is
//     used again within one backoff, checks or not. It stops once the
//     breaker closes, after proberIdle without a failed check, or when
//     the store says it is closed (ErrStoreClosed).
//   - What the stand-in admitted during the outage was never told to the
//     store. The stand-in keeps it, per key and limit (owed, at most
//     maxOwed keys: the cost of further keys is counted as dropped and
//     logged), and when the breaker closes the Guard tells the store with
//     forced takes (Request.Force: they count even past the limit), one
//     per key, replayWorkers at a time, within replayBudget; what it could
//     not tell (the store failed again, the budget ran out) stays owed for
//     the next recovery.
//
// So a key's admissions across an outage and the rest of its window are
// at most its limit plus, per instance, its share of what the stand-in
// starts it with (docs/operations.md).
const (
	proberIdle    = time.Minute
	maxOwed       = 100_000
	replayWorkers = 16
	replayBudget  = 10 * time.Second
)

// probeRequest is what the prober asks the store: a peek, which changes
// nothing.
var probeRequest = Request{Key: "sluice:probe", Limit: Limit{Algorithm: FixedWindow, Rate: 1, Period: time.Second}}

// owedKey is a key and limit the stand-in admitted for.
type owedKey struct {
	key   string
	limit Limit
}

// ledger is what the stand-in admitted and the store has not been told.
type ledger struct {
	mu      sync.Mutex
	owed    map[owedKey]int64
	dropped int64 // cost admitted for keys past maxOwed, never told
}

// add records cost admitted locally for key under limit.
func (l *ledger) add(key string, limit Limit, cost int64) {
	if cost <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := owedKey{key, limit}
	if _, ok := l.owed[k]; !ok {
		if len(l.owed) >= maxOwed {
			l.dropped += cost
			return
		}
		if l.owed == nil {
			l.owed = map[owedKey]int64{}
		}
		k.key = strings.Clone(key) // not the caller's memory
	}
	l.owed[k] += cost
}

// give takes cost off what key owes under limit: a refund decided while
// the store failed.
func (l *ledger) give(key string, limit Limit, cost int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := owedKey{key, limit}
	if owed, ok := l.owed[k]; ok {
		if owed -= min(cost, owed); owed == 0 {
			delete(l.owed, k)
		} else {
			l.owed[k] = owed
		}
	}
}

// take empties the ledger, returning what it held.
func (l *ledger) take() (map[owedKey]int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	owed, dropped := l.owed, l.dropped
	l.owed, l.dropped = nil, 0
	return owed, dropped
}

// restore puts back what a replay could not tell.
func (l *ledger) restore(owed map[owedKey]int64) {
	for k, cost := range owed {
		l.add(k.key, k.limit, cost)
	}
}

// startProber starts the prober unless it runs.
func (g *Guard) startProber() {
	if g.inproc || !g.probing.CompareAndSwap(false, true) {
		return
	}
	go g.prober()
}

// prober probes an open breaker's store after each backoff until it
// closes, or until no check has failed for proberIdle.
func (g *Guard) prober() {
	defer g.probing.Store(false)
	for {
		wait, open := g.breaker.untilProbe()
		if !open {
			return
		}
		if time.Since(time.Unix(0, g.lastFailed.Load())) > proberIdle {
			return // nobody is asking: the next failed check starts it again
		}
		time.Sleep(max(wait, time.Millisecond)) // the backoff, not a test's time
		probe, ok := g.breaker.allow()
		if !ok || !probe {
			continue // a check is probing, or the breaker closed
		}
		c := g.within(context.Background())
		c.probe = true
		d := [1]Decision{}
		err := bounded(c.ctx, g.store, []Request{probeRequest}, d[:])
		g.finish(context.Background(), c, err)
		if errors.Is(err, ErrStoreClosed) {
			return // it will not come back
		}
	}
}

// recovered runs, on a goroutine of its own, when the breaker closes
// after an outage: it tells the store what the stand-in admitted meanwhile.
func (g *Guard) recovered() {
	if g.standin != nil {
		g.replay()
	}
}

// replay tells the store what the stand-in admitted, as forced takes.
func (g *Guard) replay() {
	g.replaying.Lock() // one replay at a time
	defer g.replaying.Unlock()
	owed, dropped := g.standin.ledger.take()
	if len(owed) == 0 && dropped == 0 {
		return
	}
	start := time.Now()
	deadline := start.Add(replayBudget)
	work := make(chan owedKey)
	var mu sync.Mutex
	var told, cost int64
	var wg sync.WaitGroup
	for range min(replayWorkers, len(owed)) {
		wg.Go(func() {
			for k := range work {
				mu.Lock()
				c := owed[k]
				mu.Unlock()
				d := [1]Decision{}
				if err := g.call(context.Background(), []Request{{Key: k.key, Limit: k.limit, Cost: c, Force: true}}, d[:]); err != nil {
					continue // stays owed
				}
				mu.Lock()
				delete(owed, k)
				told, cost = told+1, cost+c
				mu.Unlock()
			}
		})
	}
	keys := make([]owedKey, 0, len(owed))
	for k := range owed {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if time.Now().After(deadline) || g.breaker.failing.Load() {
			break
		}
		work <- k
	}
	close(work)
	wg.Wait()
	g.standin.ledger.restore(owed)
	g.replayed.Add(cost)
	g.replayDropped.Add(dropped)
	level := slog.LevelInfo
	if len(owed) > 0 || dropped > 0 {
		level = slog.LevelWarn
	}
	g.transition(level, "rate limit store told what was admitted locally during the outage",
		slog.Int64("keys", told), slog.Int64("cost", cost), slog.Int("keys_left_owed", len(owed)),
		slog.Int64("dropped_cost", dropped), slog.Duration("took", time.Since(start)))
}
