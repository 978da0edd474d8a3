package httplimit

import (
	"net/http"
	pathpkg "path"
	"strings"
)

// pattern is a parsed ServeMux pattern, matched without allocating
// (ServeMux.Handler allocates for wildcards). ServeMux itself validates the
// pattern first, so the two agree on what a pattern is; precedence does not
// matter here, since every matching policy applies.
type pattern struct {
	method string   // "" for any; GET also matches HEAD, as in ServeMux
	host   string   // "" for any
	segs   []string // literal segments, "{}" for one wildcard segment
	rest   bool     // a trailing "/" or {name...}: any remainder matches
	exact  bool     // {$}: the path ends with the slash
}

func parsePattern(s string) pattern {
	var p pattern
	if m, rest, ok := strings.Cut(s, " "); ok {
		p.method, s = m, strings.TrimLeft(rest, " ")
	}
	if i := strings.IndexByte(s, '/'); i > 0 {
		p.host, s = s[:i], s[i:]
	}
	segs := strings.Split(strings.TrimPrefix(s, "/"), "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		switch {
		case last && seg == "":
			p.rest = true
		case last && seg == "{$}":
			p.exact = true
		case last && strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "...}"):
			p.rest = true
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			p.segs = append(p.segs, "{}")
		default:
			p.segs = append(p.segs, seg)
		}
	}
	return p
}

func (p *pattern) match(r *http.Request) bool {
	if p.method != "" && r.Method != p.method && !(p.method == http.MethodGet && r.Method == http.MethodHead) {
		return false
	}
	if p.host != "" {
		host := r.Host
		if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
			host = host[:i]
		}
		if host != p.host {
			return false
		}
	}
	path := r.URL.Path
	if !clean(path) {
		path = cleanPath(path) // ServeMux matches, then redirects to, the clean path
	}
	rem, slash := path[1:], true // slash: the last segment matched was followed by "/"
	for i, seg := range p.segs {
		var cur string
		if j := strings.IndexByte(rem, '/'); j >= 0 {
			cur, rem, slash = rem[:j], rem[j+1:], true
		} else {
			cur, rem, slash = rem, "", false
		}
		if cur == "" || (seg != "{}" && seg != cur) || (i < len(p.segs)-1 && !slash) {
			return false
		}
	}
	switch {
	case p.exact:
		// Without the slash, ServeMux matches and redirects to it.
		return rem == "" && (slash || len(p.segs) > 0)
	case p.rest:
		// Without the slash, ServeMux matches and redirects to it.
		return slash || (rem == "" && len(p.segs) > 0)
	}
	return !slash && rem == ""
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

// cleanPath is net/http's: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
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
