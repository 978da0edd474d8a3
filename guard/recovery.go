package guard

import (
	"context"
	"errors"
	"github.com/sluicehq/sluice"
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
//     store, nor what was given back meanwhile. The stand-in keeps their
//     balance, per key and limit (owed, at most maxOwed keys: the cost of
//     further keys is counted as dropped and logged), and when the breaker
//     closes the Guard tells the store with forced takes (Request.Force:
//     they count even past the limit) or refunds, at most the capacity
//     each, one per key, replayWorkers at a time, within replayBudget;
//     what it could not tell (the store failed again, the budget ran out)
//     stays owed for the next recovery.
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
var probeRequest = sluice.Request{Key: "sluice:probe", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}}

// owedKey is a key and limit the stand-in decided for.
type owedKey struct {
	key   string
	limit sluice.Limit
}

// owed is what the store has not been told of a key and limit: cost the
// stand-in admitted, less what was given back meanwhile (Request.Refund);
// below 0, cost to give back to the store, as a refund of a take at
// refund: of the refunds it sums, the one that gives back least.
type owed struct {
	cost   int64
	refund time.Time
}

// ledger is what the stand-in decided and the store has not been told.
type ledger struct {
	mu      sync.Mutex
	owed    map[owedKey]owed
	dropped int64 // cost decided for keys past maxOwed, never told
}

// add records cost admitted locally for key under limit.
func (l *ledger) add(key string, limit sluice.Limit, cost int64) {
	l.note(key, limit, cost, time.Time{})
}

// give records cost given back locally for key under limit, as a refund
// of a take at refund: it first cancels what the key owes the store, and
// the rest is owed back to it.
func (l *ledger) give(key string, limit sluice.Limit, cost int64, refund time.Time) {
	l.note(key, limit, -cost, refund)
}

// note adds cost to what key owes under limit, and records refund when it
// gives back less than the one recorded: when it is later for a window
// or a log, earlier for a bucket (refills), which gives back less what
// has refilled since.
func (l *ledger) note(key string, limit sluice.Limit, cost int64, refund time.Time) {
	if cost == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := owedKey{key, limit}
	o, ok := l.owed[k]
	if !ok {
		if len(l.owed) >= maxOwed {
			l.dropped += max(cost, -cost)
			return
		}
		if l.owed == nil {
			l.owed = map[owedKey]owed{}
		}
		k.key = strings.Clone(key) // not the caller's memory
	}
	o.cost += cost
	if !refund.IsZero() && (o.refund.IsZero() || refund.After(o.refund) != limit.Algorithm.HasBurst()) {
		o.refund = refund
	}
	if o.cost == 0 {
		delete(l.owed, k)
		return
	}
	l.owed[k] = o
}

// take empties the ledger, returning what it held.
func (l *ledger) take() (map[owedKey]owed, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	owed, dropped := l.owed, l.dropped
	l.owed, l.dropped = nil, 0
	return owed, dropped
}

// restore puts back what a replay could not tell.
func (l *ledger) restore(owed map[owedKey]owed) {
	for k, o := range owed {
		l.note(k.key, k.limit, o.cost, o.refund)
	}
}

// request is what tells the store o for k: a forced take of what the
// stand-in admitted, or a refund of what was given back, either at most
// the capacity (past it, the capacity: as a window current at the
// recovery, the state holds no more).
func (o owed) request(k owedKey) sluice.Request {
	r := sluice.Request{Key: k.key, Limit: k.limit, Cost: min(max(o.cost, -o.cost), k.limit.Capacity())}
	if o.cost > 0 {
		r.Force = true
	} else {
		r.Refund = o.refund
	}
	return r
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
		d := [1]sluice.Decision{}
		err := bounded(c.ctx, g.store, []sluice.Request{probeRequest}, d[:])
		g.finish(context.Background(), c, err)
		if errors.Is(err, sluice.ErrStoreClosed) {
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
	var told, cost, back int64
	var wg sync.WaitGroup
	for range min(replayWorkers, len(owed)) {
		wg.Go(func() {
			for k := range work {
				mu.Lock()
				r := owed[k].request(k)
				mu.Unlock()
				d := [1]sluice.Decision{}
				err := g.call(context.Background(), []sluice.Request{r}, d[:])
				switch {
				case sluice.IsInputError(err): // refused, and would be at every recovery
					mu.Lock()
					delete(owed, k)
					dropped += r.Cost
					mu.Unlock()
					continue
				case err != nil:
					continue // stays owed
				}
				mu.Lock()
				delete(owed, k)
				told++
				if r.Force {
					cost += r.Cost
				} else {
					back += r.Cost
				}
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
	level := slog.LevelInfo
	if len(owed) > 0 || dropped > 0 {
		level = slog.LevelWarn
	}
	// Logged before Health counts it, so that whoever reads the count
	// finds the line that explains it.
	g.transition(level, "rate limit store told what was admitted locally during the outage",
		slog.Int64("keys", told), slog.Int64("cost", cost), slog.Int64("given_back", back), slog.Int("keys_left_owed", len(owed)),
		slog.Int64("dropped_cost", dropped), slog.Duration("took", time.Since(start)))
	g.replayed.Add(cost)
	g.replayedBack.Add(back)
	g.replayDropped.Add(dropped)
}
