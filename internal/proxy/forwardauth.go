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
// It rebuilds the original request from the headers the gateway sends:
// X-Forwarded-Method and X-Forwarded-Uri (Traefik, Caddy) or
// X-Original-Method and X-Original-URI (nginx), X-Forwarded-Host, and the
// original request's own headers; the client's address is the rightmost
// X-Forwarded-For entry not in trusted_proxies. That request is decided
// by the proxy's decider, so it is limited exactly as `sluice proxy`
// would limit it, and answered 200 when allowed and 429 with Retry-After
// when refused (403 with ?deny_status=403 or the config's
// forward_auth.deny_status, for nginx, whose auth_request understands only
// 2xx, 401 and 403), with the rate headers either way. A
// request that describes no original request, or a malformed one, is
// answered 400 and charges nothing. No body is read.
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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orig, err := original(r, deny)
		if err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		allowed.ServeHTTP(w, orig)
	}), nil
}

// maxURI bounds X-Forwarded-Uri, as a request line bounds a path.
const maxURI = 8 << 10

// denyStatusKey is the context key of the status a refusal is answered with.
type denyStatusKey struct{}

// original rebuilds the request the gateway asks about; a refusal of it
// is answered deny, unless the request's ?deny_status= says otherwise.
func original(r *http.Request, deny int) (*http.Request, error) {
	method := first(r.Header, "X-Forwarded-Method", "X-Original-Method")
	uri := first(r.Header, "X-Forwarded-Uri", "X-Original-Uri")
	switch {
	case method == "" && uri == "":
		return nil, errors.New("no original request: want X-Forwarded-Method and X-Forwarded-Uri (Traefik, Caddy) or X-Original-Method and X-Original-URI (nginx)")
	case method == "":
		return nil, errors.New("no original method: want X-Forwarded-Method or X-Original-Method")
	case uri == "":
		return nil, errors.New("no original URI: want X-Forwarded-Uri or X-Original-URI")
	case !httpguts.ValidHeaderFieldName(method): // a method is a token, as a header name is
		return nil, fmt.Errorf("original method %.40q is not a token", method)
	case len(uri) > maxURI:
		return nil, fmt.Errorf("original URI of %d bytes: at most %d", len(uri), maxURI)
	case !strings.HasPrefix(uri, "/"):
		return nil, fmt.Errorf("original URI %.40q is not a path (origin form)", uri)
	case strings.ContainsFunc(uri, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return nil, fmt.Errorf("original URI %.40q holds a control character", uri)
	}
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

// first returns the first of names that r has.
func first(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
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
