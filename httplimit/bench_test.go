package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// BenchmarkAPIKeyAllowed is one allowed request through the middleware,
// keyed by a 32-byte API key on the memory store: the identity rule's
// share of a request is in it.
//
//	go test -run '^$' -bench APIKeyAllowed -count 5 ./httplimit
func BenchmarkAPIKeyAllowed(b *testing.B) {
	m, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{{
		Name: "p", Key: httplimit.APIKey("X-API-Key"), Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 40, Period: time.Second, Burst: 1 << 40}}}})
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "sk-live-0123456789abcdef01234567")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r)
	}
}
