package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// The proxy's requests in one form. A policy matches a path the way
// ServeMux would route it, but the upstream behind the proxy resolves the
// path it is sent, often after decoding it differently ("%2e%2e" is a dot
// segment to most file servers, segment text to ServeMux). So the proxy
// decides once what a request's path and host are, and both the policies
// and the upstream get that:
//
//   - The path is decoded, segment by segment; "." and ".." segments
//     (encoded or not) are resolved and repeated slashes merged, and the
//     result is sent re-encoded in Go's one escaping of it. "/x/%2e%2e/api/1",
//     "/%2e/api/1" and "/api//1" are "/api/1" to policy and upstream alike.
//   - A path that has no single meaning is refused with 400: an encoded
//     slash ("%2F", a separator to some upstreams and segment text to
//     others), a backslash (a separator on Windows), a control character
//     or NUL, or a path that does not start with "/".
//   - Policies match the path without its trailing slash ("/api/items/1/"
//     is limited by "GET /api/items/{id}": many upstreams serve it), which
//     also matches every pattern the slashed path matches; the upstream is
//     sent the slash.
//   - Policies match the path without its path parameters, as servlet
//     containers (Tomcat, Jetty, Undertow, Spring) read it: ";" and what
//     follows it up to the next "/" are dropped from each segment, before
//     the segment is decoded, so "/api;jsessionid=x/items/1" is limited
//     as "/api/items/1"; the upstream is sent the parameters. Where the
//     two readings would differ in more than a segment's text, the path
//     is refused with 400: parameters on a dot segment ("/api/..;/admin",
//     "/admin" to Tomcat and "/api/..;/admin" to most other servers), on
//     an empty one ("/;x/admin"), or an encoded semicolon ("%3B": a
//     parameter to a server that decodes before it cuts, text to one
//     that cuts first).
//   - The host is lower-case, without a trailing dot: "ADMIN.Example.COM."
//     is "admin.example.com", as DNS has it.
//   - A header a policy keys on may appear once: two X-API-Key headers
//     are refused with 400, since the limit would count one value and the
//     upstream might read the other.

// errPath is wrapped by the errors canonicalPath returns.
var errPath = errors.New("the request path has no single meaning")

// canonicalPath returns the decoded, resolved form of an escaped path.
func canonicalPath(escaped string) (string, error) {
	if escaped == "*" {
		return escaped, nil // OPTIONS *
	}
	if !strings.HasPrefix(escaped, "/") {
		return "", fmt.Errorf("%w: it does not start with /", errPath)
	}
	if strings.IndexByte(escaped, '%') < 0 && strings.IndexByte(escaped, '\\') < 0 && clean(escaped) {
		// Nothing to decode or resolve: no allocation.
		if strings.IndexByte(escaped, ';') >= 0 {
			for seg := range strings.SplitSeq(escaped[1:], "/") {
				if name, _, params := strings.Cut(seg, ";"); params && (name == "" || name == "." || name == "..") {
					return "", fmt.Errorf("%w: a path parameter on an empty or dot segment", errPath)
				}
			}
		}
		return escaped, nil
	}
	segs := strings.Split(escaped[1:], "/")
	out := make([]string, 0, len(segs))
	for _, seg := range segs {
		seg, params, hasParams := strings.Cut(seg, ";")
		dec, err := url.PathUnescape(seg)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errPath, err)
		}
		if err := segmentText(dec); err != nil {
			return "", err
		}
		if hasParams {
			switch {
			case strings.IndexByte(dec, ';') >= 0:
				return "", fmt.Errorf("%w: an encoded semicolon before a path parameter", errPath)
			case dec == "" || dec == "." || dec == "..":
				return "", fmt.Errorf("%w: a path parameter on an empty or dot segment", errPath)
			}
			p, err := url.PathUnescape(params)
			if err != nil {
				return "", fmt.Errorf("%w: %v", errPath, err)
			}
			if err := segmentText(p); err != nil {
				return "", err
			}
			out = append(out, dec+";"+p)
			continue
		}
		switch {
		case strings.IndexByte(dec, ';') >= 0:
			return "", fmt.Errorf("%w: an encoded semicolon", errPath)
		case dec == "" || dec == ".":
		case dec == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, dec)
		}
	}
	p := "/" + strings.Join(out, "/")
	if last := segs[len(segs)-1]; len(out) > 0 && (last == "" || last == "." || last == ".." || strings.EqualFold(last, "%2e") || strings.EqualFold(last, "%2e%2e")) {
		p += "/" // a path that ends in a directory keeps saying so
	}
	return p, nil
}

// segmentText reports, as an errPath error, a decoded segment that no
// reading of the path agrees on: one holding a slash, a backslash or a
// control character.
func segmentText(dec string) error {
	switch {
	case strings.ContainsAny(dec, "/\\"):
		return fmt.Errorf("%w: an encoded slash or a backslash", errPath)
	case strings.ContainsFunc(dec, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: a control character", errPath)
	}
	return nil
}

// matchPath is the path policies match of p, a canonical path: without
// its path parameters and trailing slash.
func matchPath(p string) string {
	if strings.IndexByte(p, ';') >= 0 {
		var b strings.Builder
		for i, seg := range strings.Split(p[1:], "/") {
			name, _, _ := strings.Cut(seg, ";")
			if i > 0 {
				b.WriteByte('/')
			}
			b.WriteString(name)
		}
		p = "/" + b.String()
	}
	if len(p) > 1 && strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
	}
	return p
}

// clean reports whether an unescaped path has no empty, "." or ".."
// segment (a conservative test: "/.well-known" is decoded the long way).
func clean(path string) bool {
	for i := 1; i < len(path); i++ {
		if path[i-1] == '/' && (path[i] == '/' || path[i] == '.') {
			return false
		}
	}
	return true
}

// canonicalHost is host lower-case and without a trailing dot before its
// port, if it has one.
func canonicalHost(host string) string {
	name, port := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		name, port = host[:i], host[i:]
	}
	name = strings.TrimSuffix(name, ".")
	if !strings.ContainsFunc(name, func(r rune) bool { return 'A' <= r && r <= 'Z' }) {
		if len(name)+len(port) == len(host) {
			return host
		}
		return name + port
	}
	return strings.ToLower(name) + port
}

// forwardKey is the context key under which canonical keeps the URL the
// upstream is sent while the policies see the one they match.
type forwardKey struct{}

// canonical puts r in its one form (see above) before next, which are the
// policies; forward, behind them, sends the request on with its path as
// the upstream is to see it. keyHeaders are the headers policies key on.
func canonical(next http.Handler, keyHeaders []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropConnectionHeaders(r.Header)
		for _, h := range keyHeaders {
			if len(r.Header[h]) > 1 {
				problem(w, http.StatusBadRequest, "the "+h+" header appears more than once")
				return
			}
		}
		p, err := canonicalPath(r.URL.EscapedPath())
		if err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		r.Host = canonicalHost(r.Host)
		fwd := r.URL
		if p != fwd.EscapedPath() {
			fwd = new(url.URL)
			*fwd = *r.URL
			fwd.Path, fwd.RawPath = p, ""
		}
		match := fwd
		if m := matchPath(p); m != p {
			match = new(url.URL)
			*match = *fwd
			match.Path, match.RawPath = m, ""
		}
		if match != r.URL || fwd != r.URL {
			r = r.WithContext(context.WithValue(r.Context(), forwardKey{}, fwd))
			r.URL = match
		}
		next.ServeHTTP(w, r)
	})
}

// dropConnectionHeaders removes the headers a client names in
// Connection, which the reverse proxy removes too before the upstream
// sees the request (RFC 9110, 7.6.1): a policy must not key on a header
// the upstream never receives (`Connection: X-API-Key` with a key made up
// each time). Upgrade stays: the reverse proxy reads it to carry a
// protocol switch, and sends it on.
func dropConnectionHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			name = textproto.TrimString(name)
			if name != "" && !strings.EqualFold(name, "Upgrade") && !strings.EqualFold(name, "Connection") {
				h.Del(name)
			}
		}
	}
}

// forward restores the URL canonical chose for the upstream, then calls next.
// A body of a declared length is handed on as exactly that many bytes.
func forward(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := r.Context().Value(forwardKey{}).(*url.URL); ok {
			r.URL = u
		}
		if r.ContentLength > 0 {
			r.Body = declaredBody{io.LimitReader(r.Body, r.ContentLength), r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

// declaredBody is a request body that ends at its declared length by
// itself. The transport reads a body once more after sending its declared
// length, to check that it ends there; on the client's connection that
// read raced net/http, which reads what is left of a body once the
// answer's headers go out and then closes it: when the transport came
// second it found the body closed, took it for a failed send and closed
// the upstream connection, cutting an answer already on its way.
type declaredBody struct {
	io.Reader
	io.Closer
}
