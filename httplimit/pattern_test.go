package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The matcher agrees with net/http's ServeMux on whether a pattern matches.
func TestPatternAgreesWithServeMux(t *testing.T) {
	patterns := []string{"/", "/a", "/a/", "/a/{$}", "/a/{id}", "/a/{id}/b", "/a/{rest...}", "GET /a/{id}",
		"POST /x", "example.com/h/", "/{$}", "GET /", "/a/b/c"}
	paths := []string{"/", "/a", "/a/", "/a/7", "/a/7/", "/a/7/b", "/a/7/b/", "/a/b/c", "/a/b/c/d", "/x", "/h/1", "/b", "//", "/a//b"}
	for _, pat := range patterns {
		mux := http.NewServeMux()
		mux.HandleFunc(pat, func(http.ResponseWriter, *http.Request) {})
		p := parsePattern(pat)
		for _, path := range paths {
			for _, method := range []string{"GET", "HEAD", "POST"} {
				for _, host := range []string{"example.com", "other.org:8080"} {
					r := httptest.NewRequest(method, "http://"+host+path, nil)
					_, matched := mux.Handler(r)
					// ServeMux answers a redirect (for a missing trailing
					// slash or an unclean path) with an empty pattern.
					want := matched == pat
					// Paths one slash short of a match are redirected by
					// ServeMux; the matcher counts them as the same route.
					if !strings.HasSuffix(path, "/") {
						_, slashed := mux.Handler(httptest.NewRequest(method, "http://"+host+path+"/", nil))
						if slashed == pat {
							continue
						}
					}
					if got := p.match(r); got != want && !(matched == "" && !got) {
						t.Errorf("%q on %s %s%s: matcher %v, ServeMux %q", pat, method, host, path, got, matched)
					}
				}
			}
		}
	}
}
