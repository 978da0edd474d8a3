package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// FuzzHeaders feeds the middleware's key functions arbitrary header
// values (an API key, the User-Agent fingerprint's three headers) and
// paths: no request panics; an API key past sluice.MaxIdentityLen is a
// 400, never a way around the limit; a missing one is limited by the
// client's address instead; every other request is allowed or denied, with
// the rate headers.
func FuzzHeaders(f *testing.F) {
	f.Add("k1", "curl/8.0", "en", "gzip", "/a/b")
	f.Add("", "", "", "", "/")
	f.Add("k\x00\xff", "Mozilla/5.0 (X11)", "*", "br;q=1.0", "/a%2Fb/../c")
	m, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "key-route", Limit: sluice.PerMinute(3), Key: httplimit.Compose(httplimit.APIKey("X-API-Key"), httplimit.Route()), Pattern: "/a/"},
		{Name: "ua", Limit: sluice.PerMinute(1000), Key: httplimit.UserAgent()},
	}})
	if err != nil {
		f.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f.Fuzz(func(t *testing.T, apiKey, ua, lang, enc, path string) {
		r, err := http.NewRequest("GET", "http://example.com"+path, nil)
		if err != nil {
			return
		}
		r.RemoteAddr = "192.0.2.1:1234"
		for name, v := range map[string]string{"X-API-Key": apiKey, "User-Agent": ua, "Accept-Language": lang, "Accept-Encoding": enc} {
			r.Header[name] = []string{v}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case len(apiKey) > sluice.MaxIdentityLen && w.Code != 400 && w.Header().Get("X-RateLimit-Limit") == "3":
			t.Fatalf("an API key of %d bytes: %d", len(apiKey), w.Code)
		case w.Code != 200 && w.Code != 429 && w.Code != 400:
			t.Fatalf("status %d", w.Code)
		case w.Code != 400 && w.Header().Get("X-RateLimit-Limit") == "":
			t.Fatalf("%d without the rate headers", w.Code)
		}
	})
}
