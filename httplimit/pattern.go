package httplimit

import (
	"net"
	"net/http"
	"net/url"
	pathpkg "path"
	"strings"
)

// pattern is a parsed ServeMux pattern, matched as net/http's ServeMux
// routes (server.go's findHandler, routing_tree.go's matchPath) but
// without allocating: ServeMux.Handler costs up to 9 allocations a call,
// once per policy. The rules it mirrors:
//
//   - The path matched is the request's escaped path (URL.EscapedPath),
//     cleaned of "." and ".." segments and repeated slashes; "%2F" and
//     "%2E" are not separators or dots. Each segment is unescaped before
//     it is compared, and so are a pattern's literal segments: "a%2Fb" is
//     one segment, "a/b", which "{id}" matches whole.
//   - A request that ServeMux redirects to a route of the pattern (an
//     unclean path, or a path one trailing slash short) counts as matching:
//     limiting the redirect as well errs on the safe side.
//   - GET patterns match HEAD; a pattern without a method matches any.
//   - The host is the request's Host without its port, for patterns with
//     one. CONNECT requests are neither cleaned nor stripped of the port.
//
// precedence does not matter here, since every matching policy applies.
// FuzzPatternMatchesServeMux holds the matcher to ServeMux.Handler.
type pattern struct {
	method string // "" for any; GET also matches HEAD
	host   string // "" for any
	segs   []segment
	multi  bool // ends in a trailing "/" or {name...}: any remainder
	dollar bool // ends in "/{$}": the path ends with that slash
}

// segment is a literal path segment, unescaped, or a single wildcard.
type segment struct {
	lit  string
	wild bool
}

// parsePattern parses a pattern that ValidatePattern accepted.
func parsePattern(s string) pattern {
	var p pattern
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		p.method, s = s[:i], strings.TrimLeft(s[i+1:], " \t")
	}
	i := strings.IndexByte(s, '/')
	p.host, s = s[:i], s[i:]
	for len(s) > 0 {
		s = s[1:]
		if s == "" {
			p.multi = true // trailing slash
			break
		}
		j := strings.IndexByte(s, '/')
		if j < 0 {
			j = len(s)
		}
		var seg string
		seg, s = s[:j], s[j:]
		switch {
		case seg == "":
			// An empty literal ("//" in a pattern without a method) is
			// stored in ServeMux's tree as a single wildcard is, and so
			// matches as one.
			p.segs = append(p.segs, segment{wild: true})
		case !strings.HasPrefix(seg, "{"):
			p.segs = append(p.segs, segment{lit: unescape(seg)})
		case seg == "{$}":
			p.dollar = true
		case strings.HasSuffix(seg, "...}"):
			p.multi = true
		default:
			p.segs = append(p.segs, segment{wild: true})
		}
	}
	return p
}

func (p *pattern) match(r *http.Request) bool {
	if p.method != "" && r.Method != p.method && !(p.method == http.MethodGet && r.Method == http.MethodHead) {
		return false
	}
	path := r.URL.EscapedPath()
	if r.Method == http.MethodConnect {
		// Not cleaned; the trailing-slash redirect is tried with the URL's
		// host, the match with the Host header's, port and all.
		return p.hostIs(r.URL.Host) && p.redirected(path) || p.hostIs(r.Host) && p.matchPath(path)
	}
	if !p.hostIs(stripHostPort(r.Host)) {
		return false
	}
	path = cleanPath(path) // a path that differs is redirected to this one
	return p.matchPath(path) || p.redirected(path)
}

func (p *pattern) hostIs(host string) bool { return p.host == "" || p.host == host }

// redirected reports whether ServeMux redirects path to path + "/" for this
// pattern: the path does not end in a slash and, with one, matches exactly.
func (p *pattern) redirected(path string) bool {
	if path == "" || strings.HasSuffix(path, "/") {
		return false
	}
	return p.matchPath(path+"/") && !p.inexact(path+"/")
}

// matchPath reports whether the escaped, cleaned path matches, segment by
// segment as routingNode.matchPath does.
func (p *pattern) matchPath(path string) bool {
	rem, ok := p.prefix(path)
	switch {
	case !ok:
		return false
	case p.dollar:
		// {$} is a literal "/" segment: the trailing slash, or a last
		// segment that unescapes to one ("%2F").
		if rem == "" {
			return false
		}
		seg, rest := firstSegment(rem)
		return seg == "/" && rest == ""
	case p.multi:
		return rem != ""
	}
	return rem == ""
}

// inexact reports whether a matching path matched with a multi wildcard
// taking more than nothing, by ServeMux's exactMatch: the path ends in a
// slash and has as many slashes as the pattern has segments.
func (p *pattern) inexact(path string) bool {
	return p.multi && !(strings.HasSuffix(path, "/") && len(p.segs)+1 == strings.Count(path, "/"))
}

// prefix matches the pattern's segments against the start of path and
// returns what remains.
func (p *pattern) prefix(path string) (string, bool) {
	rem := path
	for _, s := range p.segs {
		if rem == "" {
			return "", false
		}
		seg, rest := firstSegment(rem)
		if s.wild && seg == "/" || !s.wild && seg != s.lit {
			return "", false
		}
		rem = rest
	}
	return rem, true
}

// firstSegment is net/http's: the first segment of path, unescaped, and
// the rest from its slash; "/" for a path of a trailing slash.
func firstSegment(path string) (seg, rest string) {
	if path == "/" {
		return "/", ""
	}
	path = path[1:]
	i := strings.IndexByte(path, '/')
	if i < 0 {
		i = len(path)
	}
	return unescape(path[:i]), path[i:]
}

// unescape is net/http's pathUnescape: the segment unescaped, or as it is
// when its escapes are malformed. It allocates only for a segment with an
// escape.
func unescape(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// stripHostPort is net/http's: h without its port, if it has one.
func stripHostPort(h string) string {
	if strings.IndexByte(h, ':') < 0 {
		return h
	}
	host, _, err := net.SplitHostPort(h)
	if err != nil {
		return h
	}
	return host
}

// cleanPath is net/http's: path.Clean, keeping a trailing slash. A path
// that is already clean is returned without allocating.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if clean(p) {
		return p
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := pathpkg.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// clean reports whether path starts with "/" and has no "//" or "/."
// (a conservative test: "/.well-known" is clean, and cleanPath keeps it).
func clean(path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	for i := 1; i < len(path); i++ {
		if path[i-1] == '/' && (path[i] == '/' || path[i] == '.') {
			return false
		}
	}
	return true
}
