package httplimit

import (
	"net/http"
	"net/url"
	"testing"
)

// muxRoutes reports whether net/http's ServeMux, with pat alone
// registered, routes r to pat's handler, at once or by a redirect
// (ServeMux.Handler names the pattern in both cases).
func muxRoutes(pat string, r *http.Request) bool {
	mux := http.NewServeMux()
	mux.Handle(pat, http.NotFoundHandler())
	_, got := mux.Handler(r)
	return got != ""
}

// request builds a request as the server would parse it from the wire,
// or nil for a target it would refuse.
func request(method, host, target string) *http.Request {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil
	}
	return &http.Request{Method: method, Host: host, URL: u}
}

var (
	matchPatterns = []string{"/", "/a", "/a/", "/a/{$}", "/a/{id}", "/a/{id}/b", "/a/{rest...}", "GET /a/{id}",
		"POST /x", "example.com/h/", "/{$}", "GET /", "/a/b/c", "GET /api/items/{id}", "/a%2Fb", "/a/%2F", "/a/{x}/{$}",
		"/.well-known/x", "/a/b/", "CONNECT /c/", "HEAD /h", "example.com/", "[::1]/v6/"}
	matchPaths = []string{"/", "/a", "/a/", "/a/7", "/a/7/", "/a/7/b", "/a/7/b/", "/a/b/c", "/a/b/c/d", "/x", "/h/1", "/b", "//", "/a//b",
		"/api/items/1", "/api/items/a%2Fb", "/api/items/a%2fb/", "/a%2Fb", "/a%2fb", "/a/%2F", "/a/%2E%2E", "/a/./7", "/a/../a/7",
		"/a/7/..", "/%61/7", "/.well-known/x", "/a/b", "/c", "/c/", "/v6/"}
	matchMethods = []string{"GET", "HEAD", "POST", "CONNECT"}
	matchHosts   = []string{"example.com", "example.com:8080", "other.org", "[::1]:80", "[::1]"}
)

// The matcher agrees with ServeMux on every pattern, path, method and
// host of a table of the cases that have differed: escaped slashes and
// dots, dot segments, doubled and trailing slashes, HEAD and GET, hosts
// with ports, CONNECT.
func TestPatternAgreesWithServeMux(t *testing.T) {
	for _, pat := range matchPatterns {
		p := parsePattern(pat)
		for _, path := range matchPaths {
			for _, method := range matchMethods {
				for _, host := range matchHosts {
					r := request(method, host, path)
					if got, want := p.match(r), muxRoutes(pat, r); got != want {
						t.Errorf("%q on %s %s%s: matcher %v, ServeMux %v", pat, method, host, path, got, want)
					}
				}
			}
		}
	}
}

// FuzzPatternMatchesServeMux holds the matcher to ServeMux on patterns
// and requests the fuzzer makes from the table's. .ci/run runs it.
func FuzzPatternMatchesServeMux(f *testing.F) {
	for i, pat := range matchPatterns {
		f.Add(pat, matchMethods[i%len(matchMethods)], matchHosts[i%len(matchHosts)], matchPaths[i%len(matchPaths)])
	}
	f.Fuzz(func(t *testing.T, pat, method, host, target string) {
		if ValidatePattern(pat) != nil || method == "" {
			return
		}
		r := request(method, host, target)
		if r == nil {
			return
		}
		p := parsePattern(pat)
		if got, want := p.match(r), muxRoutes(pat, r); got != want {
			t.Errorf("%q on %s %s%s: matcher %v, ServeMux %v", pat, method, host, target, got, want)
		}
	})
}

// Matching a request allocates nothing, escaped segments aside.
func TestPatternMatchAllocs(t *testing.T) {
	p := parsePattern("GET /api/items/{id}")
	r := request("GET", "example.com", "/api/items/123")
	if n := testing.AllocsPerRun(100, func() { p.match(r) }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}
