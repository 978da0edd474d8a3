package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

type userKey struct{}

// A composite key's parts cannot spell another combination: a part with a
// NUL (the separator) is answered 400 and charges nobody; for any parts
// Compose accepts, the key reads back as those parts.
func TestComposePartsCannotCollide(t *testing.T) {
	redistest.HourAhead()
	key := httplimit.Compose(httplimit.User(userKey{}), httplimit.APIKey("X-Tenant"))
	m, err := httplimit.New(httplimit.Options{Store: memstore.New(memstore.Options{}), Policies: []httplimit.Policy{
		{Name: "p", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}, Key: key},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(user, tenant string) int {
		r := httptest.NewRequest("GET", "/", nil).WithContext(context.WithValue(context.Background(), userKey{}, user))
		r.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for range 3 {
		if code := serve("alice\x00acme", "x"); code != http.StatusBadRequest {
			t.Fatalf("a user ID with a NUL: %d; want 400", code)
		}
	}
	if code := serve("alice", "acme"); code != 200 {
		t.Fatalf("the victim: %d", code)
	}

	rapid.Check(t, func(t *rapid.T) {
		part := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 0, 'b'}), 1, 4, -1)
		user, tenant := part.Draw(t, "user"), part.Draw(t, "tenant")
		r := httptest.NewRequest("GET", "/", nil).WithContext(context.WithValue(context.Background(), userKey{}, user))
		r.Header["X-Tenant"] = []string{tenant}
		got, err := key(nil, r, nil)
		if err != nil {
			return
		}
		if back := strings.Split(string(got), "\x00"); len(back) != 2 || back[0] != user || back[1] != tenant {
			t.Fatalf("(%q, %q) keyed as %q", user, tenant, got)
		}
	})
}
