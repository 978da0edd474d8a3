package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// A request that waits its turn in a shaping queue and whose client goes
// away meanwhile never reaches the handler, and gives back what it took:
// its place in the queue, and the other policies' counts. Without that,
// clients that time out in the queue keep it full, and live ones are
// refused while the upstream idles.
func TestShapingGivesTheSlotBackWhenTheClientLeaves(t *testing.T) {
	redistest.HourAhead()
	store := took{Store: memstore.New(memstore.Options{}), took: make(chan struct{}, 8)}
	queue := sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Hour, Burst: 3}
	perKey := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
	m, err := httplimit.New(httplimit.Options{Store: store, Policies: []httplimit.Policy{
		{Name: "queue", Limit: queue, Key: httplimit.APIKey("X-API-Key"), Shape: true},
		{Name: "per-key", Limit: perKey, Key: httplimit.APIKey("X-API-Key")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) }))
	serve := func(ctx context.Context) int {
		r := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		r.Header.Set("X-API-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	left := func() (q, k int64) {
		t.Helper()
		dq, err := store.Store.Take(t.Context(), sluice.Request{Key: "queue\x00k", Limit: queue})
		if err != nil {
			t.Fatal(err)
		}
		dk, err := store.Store.Take(t.Context(), sluice.Request{Key: "per-key\x00k", Limit: perKey})
		if err != nil {
			t.Fatal(err)
		}
		return dq.Remaining, dk.Remaining
	}

	if code := serve(t.Context()); code != 200 || handled.Load() != 1 {
		t.Fatalf("the first request: %d, handled %d; want it through at once", code, handled.Load())
	}
	<-store.took
	q0, k0 := left()

	// The second waits an hour for its turn; its client leaves.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() { done <- serve(ctx) }()
	<-store.took
	if q, k := left(); q != q0-1 || k != k0-1 {
		t.Fatalf("while it waits: queue %d and per-key %d left, want %d and %d", q, k, q0-1, k0-1)
	}
	cancel()
	<-done
	if handled.Load() != 1 {
		t.Fatalf("handled %d, want the request that left never handled", handled.Load())
	}
	if q, k := left(); q != q0 || k != k0 {
		t.Fatalf("after its client left: queue %d and per-key %d left, want %d and %d as before it came", q, k, q0, k0)
	}
}

// took is a Store that tells on took each call that took (not a peek,
// not a refund), once its Store has decided it.
type took struct {
	sluice.Store
	took chan struct{}
}

func (s took) Take(ctx context.Context, req sluice.Request) (sluice.Decision, error) {
	d, err := s.Store.Take(ctx, req)
	if req.Cost > 0 && req.Refund.IsZero() {
		s.took <- struct{}{}
	}
	return d, err
}

func (s took) TakeAll(ctx context.Context, reqs []sluice.Request, dst []sluice.Decision) error {
	err := s.Store.TakeAll(ctx, reqs, dst)
	if len(reqs) > 0 && reqs[0].Cost > 0 && reqs[0].Refund.IsZero() {
		s.took <- struct{}{}
	}
	return err
}
