package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// countingGateway is the proxy, on store, in front of an upstream that
// counts the requests it holds at once (each for hold) into peak.
func countingGateway(t *testing.T, yaml string, store sluice.Store, hold time.Duration, peak *atomic.Int64) *httptest.Server {
	t.Helper()
	var inFlight atomic.Int64
	return gatewayTo(t, yaml, store, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(hold)
		inFlight.Add(-1)
		io.WriteString(w, "up")
	}), Deps{})
}

// TestConcurrencyOnRedis: 64 callers of one key through the proxy on
// Redis, concurrency 5: the upstream never holds more than 5 of them,
// each refused one is a 429 with Retry-After, and the slots are all free
// once the callers are done.
func TestConcurrencyOnRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	store, err := redisstore.Open(srv.URL(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var peak atomic.Int64
	gw := countingGateway(t, `
store: {type: memory}
policies:
  - {name: uploads, concurrency: 5, key: "header:X-Key", match: "/upload"}
`, store, 20*time.Millisecond, &peak)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 10 {
				req, _ := http.NewRequest("POST", gw.URL+"/upload", nil)
				req.Header.Set("X-Key", "alice")
				resp, err := client.Do(req)
				if err != nil {
					other.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429 && resp.Header.Get("Retry-After") != "":
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("640 requests: %d through, %d refused, peak in flight upstream %d", ok.Load(), refused.Load(), peak.Load())
	if peak.Load() > 5 {
		t.Fatalf("upstream held %d requests of one key at once; concurrency is 5", peak.Load())
	}
	if ok.Load() < 5 || refused.Load() == 0 || other.Load() != 0 {
		t.Fatalf("%d through, %d refused, %d other answers; want some of both and nothing else", ok.Load(), refused.Load(), other.Load())
	}
	// Every slot given back: 5 at once get through.
	peak.Store(0)
	var again sync.WaitGroup
	var through atomic.Int64
	for range 5 {
		again.Go(func() {
			req, _ := http.NewRequest("POST", gw.URL+"/upload", nil)
			req.Header.Set("X-Key", "alice")
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					through.Add(1)
				}
			}
		})
	}
	again.Wait()
	if through.Load() != 5 {
		t.Fatalf("after the callers finished, %d of 5 concurrent requests got through; slots leaked", through.Load())
	}
}

// TestConcurrencyAndRateAllOrNothing: a request refused by the rate limit
// holds no slot, and one refused for concurrency takes no rate.
func TestConcurrencyAndRateAllOrNothing(t *testing.T) {
	redistest.HourAhead()
	var peak atomic.Int64
	store := memstore.New(memstore.Options{})
	gw := countingGateway(t, `
policies:
  - {name: api, limit: fixed_window 3/1h, concurrency: 1, concurrency_wait: 2s, key: "header:X-Key", match: /}
`, store, 50*time.Millisecond, &peak)
	codes := make(chan int, 5)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() { codes <- get(t, gw.URL+"/", "X-Key", "k").StatusCode })
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	// One at a time (each waits for the slot), three admitted by the
	// rate, two refused by it: the refused ones released their slots, or
	// the later ones would have waited out concurrency_wait.
	if n[200] != 3 || n[429] != 2 || peak.Load() != 1 {
		t.Fatalf("answers %v, peak %d; want 3×200, 2×429, one at a time", n, peak.Load())
	}
	d, err := store.Take(t.Context(), sluice.Request{Key: "api\x00k", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}})
	if err != nil || d.Remaining != 0 {
		t.Fatalf("rate after: %+v, %v", d, err)
	}
}

// TestOverridesAndPlans: the proxy limits each request by its key's
// override, else its plan header's plan, else the policy's limit; an
// override set at runtime applies to the next request. A plan the policy
// does not have is told to Accounting.NoteUnknownPlan, once a request.
func TestOverridesAndPlans(t *testing.T) {
	redistest.HourAhead()
	runtime := overrides.New()
	var mu sync.Mutex
	unknown := map[string]int{}
	noteUnknown := func(policy, plan string) {
		mu.Lock()
		defer mu.Unlock()
		unknown[policy+" "+plan]++
	}
	srv := gatewayTo(t, `
policies:
  - name: api
    limit: fixed_window 1/1h
    key: "header:X-Key"
    match: /
    overrides: [{key: "partner-*", limit: fixed_window 3/1h}]
    plan_from: header:X-Plan
    plans: {pro: fixed_window 2/1h}
`, memstore.New(memstore.Options{}), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Deps{Overrides: runtime, Accounting: tally{unknownPlan: noteUnknown}})
	admitted := func(key, plan string) int {
		n := 0
		for range 6 {
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			req.Header.Set("X-Key", key)
			if plan != "" {
				req.Header.Set("X-Plan", plan)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		key, plan string
		want      int
	}{
		{"free-user", "", 1},
		{"pro-user", "pro", 2},
		{"odd-plan", "platinum", 1},
		{"partner-acme", "pro", 3}, // an override beats the plan
	} {
		if got := admitted(tc.key, tc.plan); got != tc.want {
			t.Errorf("key %q plan %q: admitted %d of 6, want %d", tc.key, tc.plan, got, tc.want)
		}
	}
	mu.Lock()
	if len(unknown) != 1 || unknown["api platinum"] != 6 {
		t.Errorf("unknown plans told %v, want plan platinum of policy api, 6 times", unknown)
	}
	mu.Unlock()
	if _, err := runtime.Set(t.Context(), "api", "vip", []sluice.Limit{{Algorithm: sluice.FixedWindow, Rate: 4, Period: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if got := admitted("vip", ""); got != 4 {
		t.Errorf("runtime override 4/1h: admitted %d of 6", got)
	}
}
