package httplimit_test

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// jsonPieces returns a JSON answer of about size bytes whose cost is at
// its end, cut into writes of 64 bytes that each end in '}', or, with
// whole, in one write.
func jsonPieces(size int, whole bool) []string {
	item := `,{"a":"` + strings.Repeat("x", 55) + `"}` // 64 bytes
	pieces := []string{`{"items":[{"a":"x"}`}
	for n := 0; n < size; n += len(item) {
		pieces = append(pieces, item)
	}
	pieces = append(pieces, `],"usage":{"total_tokens":3}}`)
	if whole {
		return []string{strings.Join(pieces, "")}
	}
	return pieces
}

// costHandler returns the middleware of a policy that reads its cost from
// a JSON answer, around a handler that writes pieces, and the request;
// each settlement goes to settled.
func costHandler(tb testing.TB, pieces [][]byte, settled func(httplimit.Settlement)) (http.Handler, *http.Request) {
	tb.Helper()
	p := httplimit.Policy{Name: "tokens", Limit: sluice.Limit{Rate: 1 << 40, Period: time.Second}, Cost: 1,
		Key: httplimit.APIKey("X-User"), CostFrom: httplimit.CostFromJSON("usage.total_tokens")}
	m, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{p},
		OnSettle: func(_ *http.Request, s httplimit.Settlement) { settled(s) }})
	if err != nil {
		tb.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, b := range pieces {
			w.Write(b)
		}
	}))
	req, _ := http.NewRequest("POST", "/v1/chat/completions", nil)
	req.Header.Set("X-User", "lou")
	return h, req
}

// costOf3 is costHandler for an answer that reports 3.
func costOf3(tb testing.TB, pieces []string) (http.Handler, *http.Request) {
	writes := make([][]byte, len(pieces))
	for i, p := range pieces {
		writes[i] = []byte(p)
	}
	return costHandler(tb, writes, func(s httplimit.Settlement) {
		if s.Actual != 3 {
			tb.Errorf("settled %+v; want 3", s)
		}
	})
}

// Where an answer is cut into writes does not change the cost read from
// it: the answer in writes of step bytes settles as the answer in one.
func FuzzJSONCostCutAnywhere(f *testing.F) {
	f.Add([]byte(`{"usage":{"total_tokens":3}}`), uint8(5))
	f.Add([]byte(`{"a":"}\"{","usage":{"total_tokens":7}} and more`), uint8(1))
	f.Add([]byte(`{"a":[1,{"b":"\\"}],"usage":{"total_tokens":9}}{"usage":{"total_tokens":1}}`), uint8(3))
	f.Add([]byte(` {"usage":{"total_tokens":-1}}`), uint8(2))
	f.Add([]byte(`{"usage":{"total_tokens":3}`), uint8(4))
	f.Add([]byte(`[{"usage":{"total_tokens":3}}]`), uint8(7))
	f.Fuzz(func(t *testing.T, doc []byte, step uint8) {
		settle := func(n int) (got httplimit.Settlement) {
			var pieces [][]byte
			for b := doc; len(b) > 0; b = b[min(n, len(b)):] {
				pieces = append(pieces, b[:min(n, len(b))])
			}
			h, req := costHandler(t, pieces, func(s httplimit.Settlement) { got = s })
			h.ServeHTTP(discard{http.Header{}}, req)
			return got
		}
		whole, cut := settle(len(doc)+1), settle(int(step)%64+1)
		if whole.Actual != cut.Actual || fmt.Sprint(whole.Err) != fmt.Sprint(cut.Err) {
			t.Fatalf("%q: at once %d (%v); in writes of %d bytes %d (%v)", doc, whole.Actual, whole.Err, step%64+1, cut.Actual, cut.Err)
		}
	})
}

// BenchmarkJSONCost reads the cost of a 1 MiB JSON answer written at once
// and in 64-byte writes that each end in '}': the two within 2× of each
// other in CPU time, cpu-ns/op (docs/performance.md).
func BenchmarkJSONCost(b *testing.B) {
	for _, c := range []struct {
		name  string
		whole bool
	}{{"write=1MiB", true}, {"write=64B", false}} {
		b.Run(c.name, func(b *testing.B) {
			h, req := costOf3(b, jsonPieces(1<<20-128, c.whole))
			b.SetBytes(1 << 20)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				h.ServeHTTP(discard{http.Header{}}, req)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// The cost of a JSON answer is read in time linear in its size however it
// is cut into writes: 256 KiB in 64-byte writes that each end in '}' take
// no more than 4 times what one write takes (the benchmark holds 2×; a
// scan that looks at the whole answer again at each '}' takes over 100
// times). Each side is its least CPU time of 5 runs, taken in turns, so
// that other work on the machine cannot decide it.
func TestJSONCostScanIsLinear(t *testing.T) {
	whole, whole0 := costOf3(t, jsonPieces(256<<10, true))
	cut, cut0 := costOf3(t, jsonPieces(256<<10, false))
	fastest := func(h http.Handler, r *http.Request, best time.Duration) time.Duration {
		start := cpuTime()
		h.ServeHTTP(discard{http.Header{}}, r)
		return min(best, cpuTime()-start)
	}
	bestWhole, bestCut := time.Hour, time.Hour
	for range 5 {
		bestWhole = fastest(whole, whole0, bestWhole)
		bestCut = fastest(cut, cut0, bestCut)
	}
	if bestCut > 4*bestWhole {
		t.Fatalf("256 KiB in 64-byte writes: %v of CPU; at once: %v; want within 4 times", bestCut, bestWhole)
	}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
