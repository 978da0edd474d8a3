package guard

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrBreakerOpen is wrapped by the error of a check that a Guard's circuit
// breaker kept from the store: the store has been failing, and it is not
// yet time to probe it again.
var ErrBreakerOpen = errors.New("guard: circuit breaker open")

// The breaker's states. Closed: every call goes to the store. Open: none
// does, until the backoff has passed. Half-open: one call at a time probes
// the store; its success closes the breaker, its failure opens it again
// for twice the backoff, up to the maximum.
const (
	breakerClosed int32 = iota
	breakerOpen
	breakerHalfOpen
)

var breakerNames = [...]string{"closed", "open", "half-open"}

// breaker is a Guard's circuit breaker and its record of the store's
// health. A healthy call costs two atomic loads; everything else is under
// mu, taken only while the store fails.
type breaker struct {
	threshold         int64
	base, maxBackoff  time.Duration
	logf              func(level slog.Level, msg string, attrs ...slog.Attr)
	state             atomic.Int32
	failing           atomic.Bool
	mu                sync.Mutex
	consecutive       int64 // failed calls in a row
	backoff           time.Duration
	openUntil         time.Time
	probing           bool
	since             time.Time // when the store started failing
	lastErr           error
	calls             int64  // failed calls in this outage
	epoch             uint64 // outages so far
	halfOpenAnnounced bool
	onRecover         func() // called, on a goroutine of its own, when an outage ends
}

func (b *breaker) init(opts Options, logf func(slog.Level, string, ...slog.Attr)) {
	b.threshold = int64(opts.BreakerFailures)
	if b.threshold <= 0 {
		b.threshold = 5
	}
	b.base, b.maxBackoff = opts.BreakerBackoff, opts.BreakerMaxBackoff
	if b.base <= 0 {
		b.base = 100 * time.Millisecond
	}
	if b.maxBackoff <= 0 {
		b.maxBackoff = 500 * time.Millisecond
	}
	b.maxBackoff = max(b.maxBackoff, b.base)
	b.backoff = b.base
	b.logf = logf
}

// allow reports whether a call may go to the store, and whether it is the
// probe of a half-open breaker.
func (b *breaker) allow() (probe, ok bool) {
	if b.state.Load() == breakerClosed {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case breakerClosed:
		return false, true
	case breakerOpen:
		if time.Now().Before(b.openUntil) {
			return false, false
		}
		b.state.Store(breakerHalfOpen)
		level := slog.LevelDebug
		if !b.halfOpenAnnounced {
			level, b.halfOpenAnnounced = slog.LevelInfo, true
		}
		b.logf(level, "rate limit store breaker half-open: probing the store with one call",
			slog.Duration("backoff", b.backoff), slog.Int64("failed_calls", b.calls))
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// success records a call the store answered.
func (b *breaker) success(probe bool) {
	if !b.failing.Load() && !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if !b.failing.Load() {
		return
	}
	// Said before the breaker closes: a check let through by the closed
	// breaker is never decided before the line that says the store is back.
	b.logf(slog.LevelInfo, "rate limit store recovered",
		slog.Duration("outage", time.Since(b.since)), slog.Int64("failed_calls", b.calls),
		slog.String("breaker", breakerNames[b.state.Load()]+" -> closed"))
	b.failing.Store(false)
	b.state.Store(breakerClosed)
	b.consecutive, b.backoff, b.halfOpenAnnounced = 0, b.base, false
	if b.onRecover != nil {
		go b.onRecover()
	}
}

// untilProbe returns how long until the breaker lets a call probe the
// store, and false when it is closed.
func (b *breaker) untilProbe() (time.Duration, bool) {
	if b.state.Load() == breakerClosed {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case breakerClosed:
		return 0, false
	case breakerOpen:
		return time.Until(b.openUntil), true
	}
	return b.base, true // half-open: a probe is out
}

// release ends a call that says nothing about the store (its caller gave
// up), freeing the probe slot.
func (b *breaker) release(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}

// failure records a failed call.
func (b *breaker) failure(probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.lastErr = err
	if !b.failing.Load() {
		b.failing.Store(true)
		b.since, b.calls = now, 0
		b.epoch++
		b.logf(slog.LevelWarn, msgFailing, slog.String("error", err.Error()))
	}
	b.calls++
	b.consecutive++
	switch b.state.Load() {
	case breakerClosed:
		if b.consecutive >= b.threshold {
			b.state.Store(breakerOpen)
			b.openUntil = now.Add(b.backoff)
			b.logf(slog.LevelWarn, "rate limit store breaker open: checks are decided by their fail_mode without calling the store",
				slog.Int64("consecutive_failures", b.consecutive), slog.Duration("backoff", b.backoff), slog.String("error", err.Error()))
		}
	case breakerHalfOpen:
		if probe {
			b.probing = false
			b.backoff = min(2*b.backoff, b.maxBackoff)
			b.state.Store(breakerOpen)
			b.openUntil = now.Add(b.backoff)
			b.logf(slog.LevelDebug, "rate limit store probe failed; breaker open again",
				slog.Duration("backoff", b.backoff), slog.String("error", err.Error()))
		}
	}
}

const msgFailing = "rate limit store failing: checks are decided by their fail_mode"

func (b *breaker) openError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Errorf("%w since %v: %w", ErrBreakerOpen, b.since.Format(time.RFC3339), b.lastErr)
}

// outage returns the number of outages so far: a new number starts the
// stand-in afresh.
func (b *breaker) outage() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

func (b *breaker) health() Health {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := Health{Failing: b.failing.Load(), Breaker: breakerNames[b.state.Load()]}
	if h.Failing {
		h.Since = b.since
	}
	if b.lastErr != nil {
		h.LastError = b.lastErr.Error()
	}
	return h
}
