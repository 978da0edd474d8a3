package httpretry_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/httpretry"
)

// A client that honours 429 and Retry-After: the first attempt is
// limited, the second, a second later, gets through.
func ExampleTransport() {
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer api.Close()
	client := &http.Client{Transport: &httpretry.Transport{MaxWait: 10 * time.Second}}
	resp, err := client.Get(api.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	// Output: 200 ok after 2 attempts
}
