package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
)

// ForwardAuth returns the handler of /v1/forward-auth: the gateway a team
// already runs (nginx auth_request, Caddy forward_auth, Traefik
// ForwardAuth, HAProxy) asks it about each request before forwarding it.
// It rebuilds the original request from the headers the gateway sends
// (see the rules below), X-Forwarded-Host, and the original request's
// own headers; the client's address is the rightmost X-Forwarded-For
// entry not in trusted_proxies. That request is decided by the proxy's
// decider, so it is limited exactly as `sluice proxy` would limit it, and
// answered 200 when allowed and 429 with Retry-After when refused (403
// with ?deny_status=403 or the config's forward_auth.deny_status, for
// nginx, whose auth_request understands only 2xx, 401 and 403), with the
// rate headers either way. A request that describes no original request,
// or a malformed one, is answered 400 and charges nothing. No body is
// read.
func ForwardAuth(cfg *config.Config, deps Deps, log *slog.Logger) (http.Handler, error) {
	d, err := newDecider(cfg, deps, log, denied, false)
	if err != nil {
		return nil, err
	}
	allowed := d.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	deny := cfg.ForwardAuth.DenyStatus
	if deny == 0 {
		deny = http.StatusTooManyRequests
	}
	pairs := describing[:]
	switch cfg.ForwardAuth.RequestHeaders {
	case config.RequestHeadersOriginal:
		pairs = describing[:1]
	case config.RequestHeadersForwarded:
		pairs = describing[1:]
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orig, err := original(r, pairs, deny)
		if err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		allowed.ServeHTTP(w, orig)
	}), nil
}

// How forward-auth reads the original request. Every gateway sends the
// client's own headers beside the ones it sets, and sets only its own
// pair: nginx (as docs/gateways.md configures it) X-Original-Method and
// X-Original-URI, Caddy, Traefik and the HAProxy script X-Forwarded-Method
// and X-Forwarded-Uri. So the pair the gateway did not set may be a
// client's, naming what it would like to be limited as:
//
//   - With forward_auth.request_headers naming a pair, only that pair is
//     read; the other is ignored.
//   - Without, a check carrying headers of both pairs is refused: one of
//     them is a client's, and sluice cannot tell which.
//   - A describing header (either pair, X-Forwarded-Host) that appears
//     twice is refused: the gateway sets each once.
//   - A fragment ("#x", which nginx passes as the client sent it) is no
//     part of the request target: it is dropped, as the upstreams that
//     parse the target as a URL drop it, so "/login#x" is "/login".
//
// The URI is then put in its canonical form, path parameters and all
// (canonical.go), as the proxy's requests are.

// pair is the two headers a gateway describes the original request in.
type pair struct{ method, uri string }

// describing are the pairs, in the order of RequestHeadersOriginal and
// RequestHeadersForwarded.
var describing = [2]pair{
	{"X-Original-Method", "X-Original-Uri"},
	{"X-Forwarded-Method", "X-Forwarded-Uri"},
}

// maxURI bounds X-Forwarded-Uri, as a request line bounds a path.
const maxURI = 8 << 10

// denyStatusKey is the context key of the status a refusal is answered with.
type denyStatusKey struct{}

// original rebuilds the request the gateway asks about from the first of
// pairs r carries; a refusal of it is answered deny, unless the request's
// ?deny_status= says otherwise.
func original(r *http.Request, pairs []pair, deny int) (*http.Request, error) {
	method, uri, err := describedBy(r.Header, pairs)
	if err != nil {
		return nil, err
	}
	switch {
	case !httpguts.ValidHeaderFieldName(method): // a method is a token, as a header name is
		return nil, fmt.Errorf("original method %.40q is not a token", method)
	case len(uri) > maxURI:
		return nil, fmt.Errorf("original URI of %d bytes: at most %d", len(uri), maxURI)
	case !strings.HasPrefix(uri, "/"):
		return nil, fmt.Errorf("original URI %.40q is not a path (origin form)", uri)
	case strings.ContainsFunc(uri, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return nil, fmt.Errorf("original URI %.40q holds a control character", uri)
	}
	uri, _, _ = strings.Cut(uri, "#")
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("original URI %.40q: %v", uri, err)
	}
	status := deny
	switch r.URL.Query().Get("deny_status") {
	case "":
	case "429":
		status = http.StatusTooManyRequests
	case "403":
		status = http.StatusForbidden
	default:
		return nil, errors.New("deny_status: want 429 or 403")
	}
	orig := r.Clone(context.WithValue(r.Context(), denyStatusKey{}, status))
	orig.Method, orig.URL, orig.RequestURI = method, u, uri
	if host := r.Header.Get("X-Forwarded-Host"); host != "" {
		orig.Host = host
	}
	orig.Body, orig.ContentLength = http.NoBody, 0
	return orig, nil
}

// describedBy returns the original method and URI that h describes in
// one of pairs, by the rules above.
func describedBy(h http.Header, pairs []pair) (method, uri string, err error) {
	var from *pair
	for i := range pairs {
		p := &pairs[i]
		if len(h[p.method]) == 0 && len(h[p.uri]) == 0 {
			continue
		}
		if from != nil {
			return "", "", fmt.Errorf("both %s/%s and %s/%s: a gateway sets one pair, so the other is a client's (forward_auth.request_headers names the gateway's)",
				from.method, from.uri, p.method, p.uri)
		}
		from = p
	}
	if from == nil {
		if len(pairs) == 1 {
			return "", "", fmt.Errorf("no original request: want %s and %s (forward_auth.request_headers)", pairs[0].method, pairs[0].uri)
		}
		return "", "", errors.New("no original request: want X-Forwarded-Method and X-Forwarded-Uri (Traefik, Caddy, HAProxy) or X-Original-Method and X-Original-URI (nginx)")
	}
	for _, name := range [...]string{from.method, from.uri, "X-Forwarded-Host"} {
		if len(h[name]) > 1 {
			return "", "", fmt.Errorf("the %s header appears more than once: a gateway sets it once", name)
		}
	}
	method, uri = h.Get(from.method), h.Get(from.uri)
	switch {
	case method == "":
		return "", "", fmt.Errorf("no original method: want %s beside %s", from.method, from.uri)
	case uri == "":
		return "", "", fmt.Errorf("no original URI: want %s beside %s", from.uri, from.method)
	}
	return method, uri, nil
}

// denied answers a refused forward-auth request as the middleware would,
// with the status the gateway asked for (deny_status) in place of 429;
// 503 when the store failed under fail_mode closed. Retry-After and the
// rate headers are already set.
func denied(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
	status := http.StatusServiceUnavailable
	if res.Denied {
		status = http.StatusTooManyRequests
		if s, ok := r.Context().Value(denyStatusKey{}).(int); ok {
			status = s
		}
	}
	httplimit.WriteRefusal(w, status, res)
}
