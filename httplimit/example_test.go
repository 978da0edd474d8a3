package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Per-route limits keyed by the real client address behind a load balancer
// in 10.0.0.0/8.
func Example() {
	ip, _ := clientip.RightmostUntrusted("X-Forwarded-For", []string{"10.0.0.0/8"}, clientip.Options{})
	m, err := httplimit.New(httplimit.Options{
		Store: memstore.New(memstore.Options{}),
		Policies: []httplimit.Policy{
			{Name: "login", Pattern: "POST /login", Key: httplimit.ClientIP(ip),
				Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 2, Period: 15 * time.Minute}},
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "welcome") })
	h := m.Handler(mux)

	for range 3 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "10.0.0.5:40000"                         // the load balancer
		r.Header.Set("X-Forwarded-For", "1.2.3.4, 203.0.113.9") // spoofed, then the client
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		retry := w.Header().Get("Retry-After")
		if retry == "" {
			retry = "-"
		}
		fmt.Println(w.Code, w.Header().Get("X-RateLimit-Remaining"), retry)
	}
	// Output:
	// 200 1 -
	// 200 0 -
	// 429 0 900
}

// An OnDenied that answers a denial with 403, for a gateway that passes on
// nothing else, and keeps the default problem body.
func ExampleWriteRefusal() {
	m, err := httplimit.New(httplimit.Options{
		Store: memstore.New(memstore.Options{}),
		Policies: []httplimit.Policy{
			{Name: "api", Key: httplimit.APIKey("X-API-Key"), Limit: sluice.Limit{Rate: 1, Period: time.Hour}},
		},
		OnDenied: func(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
			status := http.StatusServiceUnavailable // failed closed
			if res.Denied {
				status = http.StatusForbidden
			}
			httplimit.WriteRefusal(w, status, res)
		},
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusOK {
			fmt.Println(w.Code)
			continue
		}
		fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
	// Output:
	// 200
	// 403 application/problem+json {"type":"about:blank","title":"Forbidden","status":403,"detail":"rate limit \"api\" exceeded; retry in 3600 s","policy":"api","retry_after":3600}
}
