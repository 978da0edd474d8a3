package sluice_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
)

func TestNewLimiterRejectsBadLimits(t *testing.T) {
	store := memstore.New(memstore.Options{})
	if _, err := sluice.NewLimiter(store, sluice.Limit{Rate: 0, Period: time.Second}, sluice.LimiterOptions{}); !errors.Is(err, sluice.ErrInvalidLimit) {
		t.Fatalf("rate 0: %v", err)
	}
	if _, err := sluice.NewLimiter(nil, sluice.PerSecond(1), sluice.LimiterOptions{}); err == nil {
		t.Fatal("nil store accepted")
	}
}

func TestLimiterInputErrors(t *testing.T) {
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.PerSecond(5), sluice.LimiterOptions{})
	ctx := context.Background()
	for _, tt := range []struct {
		key  string
		n    int64
		want error
	}{
		{"", 1, sluice.ErrEmptyKey},
		{string(make([]byte, sluice.MaxKeyLen+1)), 1, sluice.ErrKeyTooLong},
		{"k", 6, sluice.ErrCostExceedsBurst},
		{"k", -1, sluice.ErrNegativeCost},
	} {
		if _, err := l.AllowN(ctx, tt.key, tt.n); !errors.Is(err, tt.want) {
			t.Errorf("AllowN(%d bytes, %d) = %v, want %v", len(tt.key), tt.n, err, tt.want)
		}
	}
	if d, _ := l.AllowN(ctx, "k", 5); !d.Allowed {
		t.Fatal("bad input consumed capacity")
	}
	if err := l.WaitN(ctx, "k", 6); !errors.Is(err, sluice.ErrCostExceedsBurst) {
		t.Fatalf("WaitN beyond burst = %v; want ErrCostExceedsBurst at once", err)
	}
}

func TestPeekAndReset(t *testing.T) {
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.PerMinute(2), sluice.LimiterOptions{})
	ctx := context.Background()
	l.AllowN(ctx, "k", 2)
	if d, _ := l.Peek(ctx, "k"); d.Allowed || d.Remaining != 0 {
		t.Fatalf("Peek when exhausted: %+v", d)
	}
	if d, _ := l.Peek(ctx, "k"); d.Allowed {
		t.Fatal("Peek consumed or restored capacity")
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k"); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Peek after Reset: %+v", d)
	}
}

// Wait returns at once, not at the deadline, when the deadline is sooner
// than the wait.
func TestWaitGivesUpAtOnceBeforeADeadline(t *testing.T) {
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.PerMinute(1), sluice.LimiterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := l.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- l.Wait(short, "k") }()
	select {
	case err := <-done:
		if !errors.Is(err, sluice.ErrWouldExceedDeadline) {
			t.Fatalf("Wait = %v; want ErrWouldExceedDeadline", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait blocked instead of giving up at once")
	}
}

// Wait honours cancellation while it sleeps.
func TestWaitHonoursCancel(t *testing.T) {
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.PerMinute(1), sluice.LimiterOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	l.Allow(ctx, "k")
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx, "k") }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v; want context.Canceled", err)
	}
}

// Wait on a leaky bucket sleeps each request's Delay, so requests leave
// spaced at the rate.
func TestWaitShapesAtTheRate(t *testing.T) {
	limit := sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 50, Period: time.Second, Burst: 5}
	l, _ := sluice.NewLimiter(memstore.New(memstore.Options{}), limit, sluice.LimiterOptions{})
	ctx := context.Background()
	start := time.Now()
	for range 5 {
		if err := l.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	// Five requests leave at 0, 20, 40, 60 and 80ms: at least 80ms.
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Fatalf("5 shaped requests took %v; the rate allows no less than 80ms", el)
	}
}

func TestDenyCacheAnswersWithoutTheStore(t *testing.T) {
	store := &countingStore{Store: memstore.New(memstore.Options{})}
	l, _ := sluice.NewLimiter(store, sluice.PerMinute(1), sluice.LimiterOptions{DenyCacheSize: 10})
	ctx := context.Background()
	l.Allow(ctx, "abuser")
	for range 100 {
		if d, _ := l.Allow(ctx, "abuser"); d.Allowed || d.RetryAfter <= 0 {
			t.Fatalf("cached denial: %+v", d)
		}
	}
	if n := store.calls.Load(); n != 2 {
		t.Fatalf("%d store calls; want 2 (one allowed, one denied, then cached)", n)
	}
	if d, _ := l.Allow(ctx, "other"); !d.Allowed {
		t.Fatal("another key was denied by the cache")
	}
}

// countingStore counts the calls that reach a real store.
type countingStore struct {
	sluice.Store
	calls atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, r sluice.Request) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, r)
}

// Allow on an existing key of a memory store allocates nothing: the
// Guard hands the store the caller's Request and Decision (TakeInto)
// without moving either to the heap.
func TestLimiterAllowAllocatesNothing(t *testing.T) {
	l, err := sluice.NewLimiter(memstore.New(memstore.Options{}), sluice.Limit{Rate: 1000, Period: time.Hour, Burst: 100_000_000}, sluice.LimiterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Allow(ctx, "key"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if d, err := l.Allow(ctx, "key"); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}); n != 0 {
		t.Errorf("Allow allocates %v times a call; want 0", n)
	}
}

// hung is a Store whose calls wait for their context to end.
type hung struct{ sluice.Store }

func (hung) Take(ctx context.Context, _ sluice.Request) (sluice.Decision, error) {
	<-ctx.Done()
	return sluice.Decision{}, ctx.Err()
}

// A Limiter's Timeout bounds a store call, and its FailMode decides the
// failure: closed denies with ErrStoreUnavailable, open and local allow
// without an error; OnStoreError hears of each.
func TestLimiterTimeoutAndFailModes(t *testing.T) {
	store := hung{memstore.New(memstore.Options{})}
	for _, tc := range []struct {
		mode  sluice.FailMode
		allow bool
	}{{sluice.FailClosed, false}, {sluice.FailOpen, true}, {sluice.FailLocal, true}} {
		var heard []error
		l, err := sluice.NewLimiter(store, sluice.PerMinute(10), sluice.LimiterOptions{Timeout: time.Millisecond, FailMode: tc.mode,
			OnStoreError: func(err error) { heard = append(heard, err) }})
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Allow(context.Background(), "k") // no deadline of its own: the Timeout ends it
		switch {
		case d.Allowed != tc.allow:
			t.Errorf("%v: %+v; want allowed %v", tc.mode, d, tc.allow)
		case tc.allow && err != nil:
			t.Errorf("%v: %v; want no error", tc.mode, err)
		case !tc.allow && (!errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded)):
			t.Errorf("%v: %v; want ErrStoreUnavailable wrapping the deadline", tc.mode, err)
		case len(heard) != 1:
			t.Errorf("%v: OnStoreError heard %v; want the one failure", tc.mode, heard)
		}
		// A reservation allowed by the fail mode took nothing, and settles nothing.
		if r, _ := l.Reserve(context.Background(), "k", 3); tc.allow && r.Settle(context.Background(), 1) != nil {
			t.Errorf("%v: settling a reservation the fail mode allowed", tc.mode)
		}
	}
}
