package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// A request whose policy's key is missing is decided by the policy's
// Missing: by default limited per client address (20 requests without an
// API key from one address on 3/1h: 3 pass, and another address has its
// own 3), deny answers 400 and takes nothing from the request's other
// policy, skip lets it through.
func TestMissingKey(t *testing.T) {
	redistest.HourAhead()
	hour := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: n, Period: time.Hour}
	}
	for _, tt := range []struct {
		missing      sluice.MissingKey
		want         map[int]int // status → count of 20 from one address
		otherCharged int64       // what the per-address policy lost
	}{
		{sluice.MissingClientIP, map[int]int{200: 3, 429: 17}, 3}, // a denied request takes nothing
		{sluice.MissingDeny, map[int]int{400: 20}, 0},
		{sluice.MissingSkip, map[int]int{200: 20}, 20},
	} {
		t.Run(tt.missing.String(), func(t *testing.T) {
			store := memstore.New(memstore.Options{})
			ip, _ := httplimitClientIP()
			m, err := httplimit.New(httplimit.Options{Store: store, Policies: []httplimit.Policy{
				{Name: "per-key", Limit: hour(3), Key: httplimit.APIKey("X-API-Key"), Missing: tt.missing},
				{Name: "per-ip", Limit: hour(1000), Key: ip},
			}})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			serve := func(addr, apiKey string) int {
				r := httptest.NewRequest("GET", "/", nil)
				r.RemoteAddr = addr + ":1234"
				if apiKey != "" {
					r.Header.Set("X-API-Key", apiKey)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			got := map[int]int{}
			for range 20 {
				got[serve("192.0.2.1", "")]++
			}
			for code, n := range tt.want {
				if got[code] != n {
					t.Fatalf("20 requests without an API key: %v; want %v", got, tt.want)
				}
			}
			d, err := store.Take(t.Context(), sluice.Request{Key: "per-ip\x00192.0.2.1", Limit: hour(1000)})
			if err != nil || 1000-d.Remaining != tt.otherCharged {
				t.Fatalf("the per-address policy was charged %d; want %d", 1000-d.Remaining, tt.otherCharged)
			}
			if tt.missing == sluice.MissingClientIP {
				if code := serve("192.0.2.2", ""); code != 200 {
					t.Fatalf("another address without an API key: %d", code)
				}
			}
			if code := serve("192.0.2.1", "k1"); code != 200 {
				t.Fatalf("a request with its API key: %d", code)
			}
		})
	}
}

func httplimitClientIP() (httplimit.KeyFunc, error) {
	r, err := clientip.RemoteAddr(clientip.Options{})
	return httplimit.ClientIP(r), err
}
