package server

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The inspector shows and resets the limits a key is decided under (its
// override's, not the policy's), a composite key is shown Go-quoted and
// taken back in that form, a link cannot make a page say anything, and
// no page has an inline handler, which its own CSP would block.
func TestInspectorKeyAsDecided(t *testing.T) {
	redistest.HourAhead()
	r, admin := startUI(t, `policies:
  - name: api
    limit: fixed_window 10/1h
    overrides: [{key: vip, limit: fixed_window 2/1h}]
`)
	b := browser()
	fetch(t, b, "POST", admin+"/ui/login", url.Values{"token": {"s3cret"}})
	for range 3 {
		r.check(t, "api", "vip")
	}
	if res, _ := r.check(t, "api", "vip"); res.Allowed {
		t.Fatal("vip allowed past its override of 2")
	}
	_, body, _ := fetch(t, b, "GET", admin+"/ui/policy/api?key=vip", nil)
	if !strings.Contains(body, "fixed_window 2/h") || strings.Contains(body, "fixed_window 10/h") {
		t.Fatalf("the inspector does not show vip's own limit:\n%s", body)
	}
	csrf := csrfField.FindStringSubmatch(body)[1]
	if code, _, _ := fetch(t, b, "POST", admin+"/ui/reset", url.Values{"csrf": {csrf}, "policy": {"api"}, "key": {"vip"}, "confirm": {"yes"}}); code != http.StatusSeeOther {
		t.Fatalf("reset: %d", code)
	}
	if res, _ := r.check(t, "api", "vip"); !res.Allowed {
		t.Fatal("vip still denied after the status page reset it")
	}

	// A composite key, as the proxy counts one.
	composite := "192.0.2.1\x00/api/x"
	r.CountCheck("api", guard.Denied, composite, nil, time.Now())
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	for range 10 {
		r.store.Take(context.Background(), sluice.Request{Key: "api\x00" + composite, Limit: l, Cost: 1})
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/policy/api", nil)
	quoted := `&#34;192.0.2.1\x00/api/x&#34;`
	if !strings.Contains(body, quoted) {
		t.Fatalf("the composite key is not shown quoted:\n%s", body)
	}
	_, body, _ = fetch(t, b, "GET", admin+"/ui/policy/api?key="+url.QueryEscape(`"192.0.2.1\x00/api/x"`), nil)
	if !strings.Contains(body, "<td>false</td>") {
		t.Fatalf("the quoted key does not inspect the composite key:\n%s", body)
	}
	fetch(t, b, "POST", admin+"/ui/reset", url.Values{"csrf": {csrf}, "policy": {"api"}, "key": {`"192.0.2.1\x00/api/x"`}, "confirm": {"yes"}})
	if d, err := r.store.Take(context.Background(), sluice.Request{Key: "api\x00" + composite, Limit: l}); err != nil || d.Remaining != 10 {
		t.Fatalf("the composite key after its reset: %+v, %v", d, err)
	}

	_, body, _ = fetch(t, b, "GET", admin+"/ui/policy/api?flash=Your+session+expired.+Call+555-0100", nil)
	if strings.Contains(body, "555-0100") {
		t.Fatal("a link made the page show its text")
	}
	for _, path := range []string{"/ui/", "/ui/policy/api?key=vip", "/ui/sim", "/ui/login"} {
		_, body, _ := fetch(t, b, "GET", admin+path, nil)
		for _, attr := range []string{"onsubmit=", "onclick=", "onload=", "javascript:"} {
			if strings.Contains(body, attr) {
				t.Errorf("%s has an inline %s, which the page's CSP blocks", path, attr)
			}
		}
	}
}
