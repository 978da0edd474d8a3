package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
)

const reserveConfig = `policies:
  - name: tokens
    limit: sliding_log 10000/1m # exact, and nothing comes back within a test
    cost: 500
`

// post posts body to path and returns the status and the answer.
func (r *running) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := client.Post(r.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

func (r *running) reserve(t *testing.T, key string, cost int64) (string, float64) {
	t.Helper()
	body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: "tokens", Key: key, Cost: &cost, Reserve: true}}})
	resp, err := client.Post(r.base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out CheckResponse
	json.NewDecoder(resp.Body).Decode(&out)
	res := out.Results[0]
	if res.Allowed && (res.Reservation == "" || res.ReservationExpires == "") {
		t.Fatalf("an allowed reservation without its id or expiry: %+v", res)
	}
	return res.Reservation, float64(res.Remaining)
}

// /v1/check reserves, /v1/settle settles to the actual cost and
// /v1/cancel gives it back; an unknown id, one settled already, or one of
// another key or policy is refused and changes nothing: on memory and on
// Redis.
func TestReservationsOverTheAPI(t *testing.T) {
	for name, url := range map[string]string{"memory": "", "redis": redistest.Standalone(t).URL()} {
		t.Run(name, func(t *testing.T) {
			r := start(t, reserveConfig, url)
			key := "alice-" + name
			left := func() float64 {
				cost := int64(0)
				body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: "tokens", Key: key, Cost: &cost}}})
				resp, err := client.Post(r.base+"/v1/check", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out CheckResponse
				json.NewDecoder(resp.Body).Decode(&out)
				return float64(out.Results[0].Remaining)
			}
			id, remaining := r.reserve(t, key, 500)
			if remaining != 9500 {
				t.Fatalf("reserved 500: %v left", remaining)
			}
			code, out := r.post(t, "/v1/settle", fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":%q,"cost":3000}`, id, key))
			if code != 200 || out["charged"] != 3000.0 || out["estimate"] != 500.0 {
				t.Fatalf("settle: %d %v", code, out)
			}
			if got := left(); got != 7000 {
				t.Fatalf("settled 500 to 3000: %v left, want 7000", got)
			}
			for _, c := range []struct {
				body string
				want int
			}{
				{fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":%q,"cost":0}`, id, key), 404}, // settled already
				{`{"reservation":"00ff","policy":"tokens","key":"alice","cost":0}`, 404},              // unknown
				{`{"policy":"tokens","key":"alice","cost":0}`, 400},                                   // no id
				{fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":%q}`, id, key), 400},          // no cost
			} {
				if code, out := r.post(t, "/v1/settle", c.body); code != c.want {
					t.Fatalf("%s: %d %v, want %d", c.body, code, out, c.want)
				}
			}
			id, _ = r.reserve(t, key, 2000)
			if code, _ := r.post(t, "/v1/cancel", fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":"mallory"}`, id)); code != 409 {
				t.Fatalf("a cancel for another key: %d, want 409", code)
			}
			if got := left(); got != 5000 {
				t.Fatalf("after a refused cancel: %v left, want 5000", got)
			}
			if code, out := r.post(t, "/v1/cancel", fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":%q}`, id, key)); code != 200 || out["charged"] != 0.0 {
				t.Fatalf("cancel: %d %v", code, out)
			}
			if got := left(); got != 7000 {
				t.Fatalf("cancelled 2000: %v left, want 7000", got)
			}
			metrics := r.metrics(t)
			for _, want := range []string{`sluice_cost_estimated_total{policy="tokens"} 2500`, `sluice_cost_charged_total{policy="tokens"} 3000`} {
				if !strings.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

// A reservation never settled expires and keeps its estimate.
func TestReservationExpires(t *testing.T) {
	var rs reservations
	now := time.Now()
	open := func() string {
		size := reservationSize("p\x00k", 1)
		if err := rs.hold(testBounds, "p", "p\x00k", size, now); err != nil {
			t.Fatal(err)
		}
		return rs.open(&reservation{policy: "p", key: "k", storeKey: "p\x00k", estimate: 5, size: size}, now)
	}
	id := open()
	if _, err := rs.take(id, "p", "k", now.Add(reservationTTL)); err != errNoReservation {
		t.Fatalf("a reservation past its expiry: %v, want errNoReservation", err)
	}
	if n, b := rs.stats(); n != 0 || b != 0 {
		t.Fatalf("expired, it still holds %d reservations of %d bytes", n, b)
	}
	id = open()
	if _, err := rs.take(id, "p", "k", now.Add(reservationTTL-time.Microsecond)); err != nil {
		t.Fatalf("a reservation before its expiry: %v", err)
	}
}

// Envoy's pattern for costs known at the end of a stream: the request
// path checks one hit, and the same descriptor gets the answer's tokens
// as hits_addend once the stream is done (apply_on_stream_done), with
// count: all so that they are charged even past the limit. 10000 tokens
// a minute, 3000 an answer: requests 1 to 4 are OK, the 5th OVER_LIMIT.
func TestEnvoyHitsOnStreamDone(t *testing.T) {
	r := start(t, `domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10000, count: all}
`, "")
	rl := r.rlsClient(t)
	ask := func(hits uint32) rlspb.RateLimitResponse_Code {
		resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "llm", HitsAddend: hits,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	for i := range 4 {
		if got := ask(1); got != rlspb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", i+1, got)
		}
		ask(3000) // on stream done: its answer is not enforced
	}
	if got := ask(1); got != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request 5: %v, want OVER_LIMIT: the 4th answer's tokens were charged past the limit", got)
	}
}

// A descriptor with is_negative_hits gives its hits back to the limits it
// matches, on every algorithm and both stores: 10 a day taken whole and
// refused the 11th, 4 given back let exactly 4 more through, and more
// given back than was taken fills the limit to its capacity, no further.
// The give-back is OK, never over, and does not make its request so.
func TestEnvoyNegativeHitsGiveBack(t *testing.T) {
	redistest.HourAhead()
	var cfg strings.Builder
	cfg.WriteString("domains:\n  - domain: d\n    descriptors:\n")
	algs := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"}
	for _, a := range algs {
		fmt.Fprintf(&cfg, "      - key: %s\n        rate_limit: {unit: day, requests_per_unit: 10, algorithm: %s}\n", a, a)
	}
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := ""
			if store == "redis" {
				url = redistest.Standalone(t).URL()
			}
			r := start(t, cfg.String(), url)
			rl := r.rlsClient(t)
			for _, alg := range algs {
				desc := func(hits uint64, back bool) *ratelimitv3.RateLimitDescriptor {
					return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: alg, Value: "ann"}},
						HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: back}
				}
				ask := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
					t.Helper()
					resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: ds})
					if err != nil {
						t.Fatalf("%s: %v", alg, err)
					}
					return resp
				}
				if got := ask(desc(10, false)); got.OverallCode != rlspb.RateLimitResponse_OK {
					t.Fatalf("%s: 10 of 10: %v", alg, got.OverallCode)
				}
				if got := ask(desc(1, false)); got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("%s: the 11th: %v, want OVER_LIMIT", alg, got.OverallCode)
				}
				// Given back beside a descriptor over its limit: that one
				// decides the request, the give-back is OK on its own.
				got := ask(desc(1, false), desc(4, true))
				if got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT || got.Statuses[1].Code != rlspb.RateLimitResponse_OK ||
					got.Statuses[1].LimitRemaining != 4 {
					t.Fatalf("%s: 4 given back beside one over: overall %v, give-back's status %v, want OVER_LIMIT and OK with 4 remaining",
						alg, got.OverallCode, got.Statuses[1])
				}
				for i := range 4 {
					if got := ask(desc(1, false)); got.OverallCode != rlspb.RateLimitResponse_OK {
						t.Fatalf("%s: given back %d of 4: %v", alg, i+1, got.OverallCode)
					}
				}
				if got := ask(desc(1, false)); got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("%s: past the 4 given back: %v, want OVER_LIMIT", alg, got.OverallCode)
				}
				if got := ask(desc(1000, true)); got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 10 {
					t.Fatalf("%s: 1000 given back: %v, %d remaining, want OK and 10 (the capacity)", alg, got.OverallCode, got.Statuses[0].LimitRemaining)
				}
				if got := ask(desc(11, false)); got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("%s: 11 after a refill past the capacity: %v, want OVER_LIMIT", alg, got.OverallCode)
				}
				series := fmt.Sprintf(`sluice_envoy_descriptor_checks_total{descriptor="d.%s",result="returned"}`, alg)
				if got := metricValue(t, r, series); got != 2 {
					t.Errorf("%s = %v, want 2", series, got)
				}
			}
		})
	}
}

// annsHits returns a function that sends domain d one descriptor,
// user=ann, of hits, given back when back is set.
func annsHits(t *testing.T, rl rlspb.RateLimitServiceClient) func(hits uint64, back bool) *rlspb.RateLimitResponse {
	return func(hits uint64, back bool) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}, HitsAddend: wrapperspb.UInt64(hits), IsNegativeHits: back}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// Hits an Envoy descriptor gives back while Redis hangs, under fail_mode
// local, go back to the stand-in that counted the outage's hits, and to
// Redis when it recovers, net of what the stand-in admitted: 8 of 10
// taken, 5 given back during the hang, and then exactly 7 are admitted,
// and Redis is told the 2 taken beyond what was given back.
func TestEnvoyGiveBackDuringOutage(t *testing.T) {
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	r := start(t, `store: {type: redis, url: redis://127.0.0.1:1, timeout: 200ms, fail_mode: local}
domains:
  - domain: d
    descriptors:
      - {key: user, rate_limit: {unit: day, requests_per_unit: 10}}
`, redis.URLVia(proxy.Addr))
	ask := annsHits(t, r.rlsClient(t))
	if got := ask(8, false); got.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("8 of 10 while Redis answers: %v", got.OverallCode)
	}
	proxy.Stall(true)
	if got := ask(5, true); got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("5 given back while Redis hangs: %v, %d remaining; want OK and 7 (2 left and 5 given back)", got.OverallCode, got.Statuses[0].LimitRemaining)
	}
	admitted := 0
	for range 10 {
		if ask(1, false).OverallCode == rlspb.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 7 {
		t.Fatalf("the hang admitted %d; want 7", admitted)
	}
	if got := ask(0, false); got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("0 hits on the key the hang used up: %v, %d remaining; want OK and 0", got.OverallCode, got.Statuses[0].LimitRemaining)
	}
	proxy.Stall(false)
	// The service finds Redis back by itself and tells it: the event.
	const told = "sluice_store_replayed_cost_total"
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, r, told) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after Redis came back, nothing told:\n%s", r.log)
		}
	}
	if got, back := metricValue(t, r, told), metricValue(t, r, "sluice_store_replayed_given_back_total"); got != 2 || back != 0 {
		t.Fatalf("told Redis %v taken and %v given back; want 2 (7 admitted less 5 given back) and 0", got, back)
	}
	if got := ask(1, false); got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the recovery: %v, want OVER_LIMIT (10 of 10 in Redis)", got.OverallCode)
	}
}

// A descriptor of 0 hits asks for nothing, which no limit refuses: on a
// used-up key it is OK with 0 remaining, as envoyproxy/ratelimit answers
// (OVER_LIMIT only once a request's hits pass the limit), and it takes
// nothing. Given back (is_negative_hits), 0 hits give nothing back and
// are OK too: a give-back never makes its request OVER_LIMIT.
func TestEnvoyZeroHits(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := ""
			if store == "redis" {
				url = redistest.Standalone(t).URL()
			}
			r := start(t, "domains:\n  - domain: d\n    descriptors:\n      - {key: user, rate_limit: {unit: day, requests_per_unit: 3}}\n", url)
			ask := annsHits(t, r.rlsClient(t))
			if got := ask(0, false); got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 3 {
				t.Fatalf("0 hits on a fresh key: %v, %d remaining; want OK and 3", got.OverallCode, got.Statuses[0].LimitRemaining)
			}
			if got := ask(3, false); got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("3 of 3: %v, %d remaining; want OK and 0 (0 hits took nothing)", got.OverallCode, got.Statuses[0].LimitRemaining)
			}
			for _, back := range []bool{false, true} {
				got := ask(0, back)
				if got.OverallCode != rlspb.RateLimitResponse_OK || got.Statuses[0].Code != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != 0 {
					t.Fatalf("0 hits (given back: %v) on a used-up key: %v, status %v; want OK with 0 remaining", back, got.OverallCode, got.Statuses[0])
				}
			}
			if got := ask(1, false); got.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("1 hit on the used-up key: %v, want OVER_LIMIT", got.OverallCode)
			}
			for series, want := range map[string]float64{
				`sluice_envoy_descriptor_checks_total{descriptor="d.user",result="allowed"}`:  3,
				`sluice_envoy_descriptor_checks_total{descriptor="d.user",result="returned"}`: 1,
				`sluice_envoy_descriptor_checks_total{descriptor="d.user",result="denied"}`:   1,
			} {
				if got := metricValue(t, r, series); got != want {
					t.Errorf("%s = %v, want %v", series, got, want)
				}
			}
		})
	}
}

// A request answered OVER_LIMIT takes nothing: Envoy refuses it, so the
// descriptors its other limits allowed give their hits back, on every
// algorithm and both stores. With a per-user limit of 10 and a per-path
// limit of 2 in one request, the 3rd to 7th requests are refused by the
// path's limit and leave the user's 8 untouched, and the user then gets
// exactly 8 more. A limit that counts every request (count: all) keeps
// them.
func TestEnvoyRefusedRequestTakesNothing(t *testing.T) {
	redistest.HourAhead()
	var cfg strings.Builder
	cfg.WriteString("domains:\n  - domain: d\n    descriptors:\n      - {key: path, rate_limit: {unit: day, requests_per_unit: 2}}\n")
	algs := []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"}
	for _, a := range algs {
		fmt.Fprintf(&cfg, "      - {key: %s, rate_limit: {unit: day, requests_per_unit: 10, algorithm: %s}}\n", a, a)
	}
	cfg.WriteString("      - {key: counted, rate_limit: {unit: day, requests_per_unit: 10, count: all}}\n")
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := ""
			if store == "redis" {
				url = redistest.Standalone(t).URL()
			}
			rl := start(t, cfg.String(), url).rlsClient(t)
			for _, user := range append(algs, "counted") {
				ask := func(path string) *rlspb.RateLimitResponse {
					t.Helper()
					ds := []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: user, Value: "ann"}}}}
					if path != "" {
						ds = append(ds, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: path}}})
					}
					resp, err := rl.ShouldRateLimit(t.Context(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: ds})
					if err != nil {
						t.Fatal(err)
					}
					return resp
				}
				for i := range 7 {
					want, left := rlspb.RateLimitResponse_OK, uint32(9-i)
					if i >= 2 {
						want, left = rlspb.RateLimitResponse_OVER_LIMIT, 8 // the path's limit refuses: nothing taken
					}
					if user == "counted" && i >= 2 {
						left = uint32(max(8-(i-1), 0)) // counts every request
					}
					got := ask("/" + user)
					if got.OverallCode != want || got.Statuses[0].Code != rlspb.RateLimitResponse_OK || got.Statuses[0].LimitRemaining != left {
						t.Fatalf("%s: request %d with the path: %v, user's status %v; want %v, the user OK with %d remaining", user, i+1, got.OverallCode, got.Statuses[0], want, left)
					}
				}
				admitted := 0
				for range 12 {
					if ask("").OverallCode == rlspb.RateLimitResponse_OK {
						admitted++
					}
				}
				if want := map[bool]int{true: 3, false: 8}[user == "counted"]; admitted != want {
					t.Fatalf("%s: the user alone admitted %d after the refused requests; want %d", user, admitted, want)
				}
			}
		})
	}
}

// Refused requests give back exactly what they took, however many race:
// 64 callers send 10 requests each of a user (50 a day) on a path (20 a
// day); exactly 20 are OK, and the user, charged for those 20 alone, then
// gets exactly 30 more.
func TestEnvoyRefusedRequestsUnderConcurrency(t *testing.T) {
	const cfg = "domains:\n  - domain: d\n    descriptors:\n      - {key: path, rate_limit: {unit: day, requests_per_unit: 20}}\n      - {key: user, rate_limit: {unit: day, requests_per_unit: 50}}\n"
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			url := ""
			if store == "redis" {
				url = redistest.Standalone(t).URL()
			}
			rl := start(t, cfg, url).rlsClient(t)
			user := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ann"}}}
			both := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{user,
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/p"}}}}}
			var ok atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for range 64 {
				wg.Go(func() {
					for range 10 {
						resp, err := rl.ShouldRateLimit(context.Background(), both)
						if err != nil {
							errs <- err
							return
						}
						if resp.OverallCode == rlspb.RateLimitResponse_OK {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if ok.Load() != 20 {
				t.Fatalf("%d requests OK; want 20, the path's limit", ok.Load())
			}
			alone := 0
			for range 40 {
				resp, err := rl.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{user}})
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == rlspb.RateLimitResponse_OK {
					alone++
				}
			}
			if alone != 30 {
				t.Fatalf("the user alone got %d after; want 30 (50 less the 20 OK)", alone)
			}
		})
	}
}

// A reservation whose check failed open took nothing, so settling it
// moves nothing: a settle for less than the estimate, once Redis is back,
// would otherwise give back what was never taken, and the key would admit
// more than its limit.
func TestFailedOpenReservationSettlesNothing(t *testing.T) {
	redis := redistest.Standalone(t)
	proxy := faultproxy.Start(t, redis.Addr)
	// GCRA: a refund is room, whatever took it (a sliding log gives back
	// only its entries since the take).
	r := start(t, "policies:\n  - {name: tokens, limit: 10000/720h, cost: 500, fail_mode: open}\n", redis.URLVia(proxy.Addr))
	key := "alice"
	cost := int64(9000)
	if code, body := r.postChecks(t, Check{Policy: "tokens", Key: key, Cost: &cost}); code != 200 || !strings.Contains(string(body), `"remaining":1000`) {
		t.Fatalf("healthy check of 9000: %d %s", code, body)
	}
	proxy.Down()
	body, _ := json.Marshal(CheckRequest{Checks: []Check{{Policy: "tokens", Key: key, Reserve: true}}})
	code, out := r.post(t, "/v1/check", string(body))
	res := out["results"].([]any)[0].(map[string]any)
	if code != 200 || res["failed_open"] != true || res["reservation"] == nil {
		t.Fatalf("reserve during the outage: %d %v; want failed open with a reservation", code, out)
	}
	proxy.Up()
	// decided peeks at key until Redis decides (a connection the outage
	// broke fails one call, open), and returns that answer.
	decided := func(key string) string {
		peek := int64(0)
		for deadline := time.Now().Add(30 * time.Second); ; {
			code, body := r.postChecks(t, Check{Policy: "tokens", Key: key, Cost: &peek})
			if code == 200 && !strings.Contains(string(body), `"failed_open"`) {
				return string(body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("checks still failed open 30 s after Redis came back: %d %s", code, body)
			}
		}
	}
	for range 3 { // Redis decides again, on every connection the outage broke
		decided("probe")
	}
	code, out = r.post(t, "/v1/settle", fmt.Sprintf(`{"reservation":%q,"policy":"tokens","key":%q,"cost":100}`, res["reservation"], key))
	if code != 200 {
		t.Fatalf("settle: %d %v", code, out)
	}
	if body := decided(key); !strings.Contains(body, `"remaining":1000`) {
		t.Fatalf("after settling a reservation that failed open: %s; want 1000 left, as before it", body)
	}
}
