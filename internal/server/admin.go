package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/door"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/memstore"
)

// adminHandler serves the admin API; every call needs the bearer token.
//
//	GET    /admin/config                    the loaded config file, secrets redacted
//	GET    /admin/readyz                    /readyz with the store's errors and addresses
//	GET    /admin/keys?policy=P&key=K       the key's state under each limit (a peek)
//	DELETE /admin/keys?policy=P&key=K       reset the key under each limit
//	GET    /admin/overrides                 the overrides set here, every one
//	PUT    /admin/overrides                 {"policy":P,"key":K,"limits":["1000/1m"]}: K's own limits
//	DELETE /admin/overrides?policy=P&key=K  remove K's override
//
// Domains take ?domain=D&entry=k=v&entry=k2=v2 instead of policy and key.
// Every call and every refused token is logged with the caller's
// address; a source address that sends wrong tokens is throttled
// (adminFailures in any minute, each counted before it is compared, then
// 429 until the oldest of them is a minute old), by sluice itself.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/config", func(w http.ResponseWriter, r *http.Request) {
		cfg := s.state().cfg
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("X-Sluice-Config-File", cfg.File)
		w.Write(config.Redact(cfg.Source))
	})
	mux.HandleFunc("GET /admin/keys", s.adminKey)
	mux.HandleFunc("DELETE /admin/keys", s.adminKey)
	mux.HandleFunc("GET /admin/overrides", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		cfg := s.state().cfg
		list := s.overrides.List()
		for i := range list {
			list[i].Key = shownKey(cfg, list[i].Policy, list[i].Key)
		}
		json.NewEncoder(w).Encode(map[string]any{"overrides": list})
	})
	mux.HandleFunc("GET /admin/readyz", func(w http.ResponseWriter, r *http.Request) {
		status, _, detail := s.readiness(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		io.WriteString(w, detail)
	})
	mux.HandleFunc("PUT /admin/overrides", s.adminSetOverride)
	mux.HandleFunc("DELETE /admin/overrides", s.adminSetOverride)
	failures, _ := sluice.NewLimiter(memstore.New(memstore.Options{MaxKeys: 100_000}),
		sluice.Limit{Algorithm: sluice.SlidingLog, Rate: adminFailures, Period: time.Minute}, sluice.LimiterOptions{})
	s.ui = newUI(s, failures)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/favicon.ico" {
			// Browsers ask for it on every page of the status page,
			// without a credential: no icon, and no wrong token.
			w.Header().Set("Cache-Control", "max-age=86400")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if s.adminToken() == "" {
			// The token was removed by a reload: nothing authenticates
			// until the listener closes.
			problem(w, http.StatusNotFound, "the admin API is closed: no admin token is set", "")
			return
		}
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			if r.URL.Path == "/ui" {
				http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
				return
			}
			s.ui.ServeHTTP(w, r) // its own login, by cookie
			return
		}
		from := remoteIP(r)
		auth := r.Header.Get("Authorization")
		got, bearer := strings.CutPrefix(auth, "Bearer ")
		if !bearer {
			got = ""
		}
		ok, locked, retry := s.admitToken(r.Context(), failures, from, auth, got)
		if locked {
			s.refusedAdmin(lockedOut, "admin: wrong tokens from this address; refused until the oldest is a minute old", from, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
			problem(w, http.StatusTooManyRequests, "too many wrong tokens from this address; retry later", "")
			return
		}
		if !ok {
			s.refusedAdmin(wrongToken, "admin: refused: no valid bearer token", from, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			problem(w, http.StatusUnauthorized, "a valid bearer token is required", "")
			return
		}
		q := r.URL.Query()
		cfg := s.state().cfg
		var entries []string
		for _, e := range q["entry"] {
			entries = append(entries, shownKey(cfg, q.Get("domain"), e))
		}
		s.log.Info("admin: "+r.Method+" "+r.URL.Path, "remote", from, "policy", q.Get("policy"), "key", shownKey(cfg, q.Get("policy"), q.Get("key")),
			"domain", q.Get("domain"), "entries", strings.Join(entries, ","))
		mux.ServeHTTP(w, r)
	})
}

// admitToken reports whether token, of a request from the address from
// whose credential (an Authorization header, a login form's token) is
// given, is the admin token, or that the address is locked out of
// comparing any (until retry). A credential is counted as a failure
// before it is compared, and given back when it is right: however many
// wrong ones arrive at once, at most adminFailures a minute are compared.
// A request without a credential guesses nothing: it is not counted.
func (s *Server) admitToken(ctx context.Context, failures *sluice.Limiter, from, given, token string) (ok, locked bool, retry time.Duration) {
	if given == "" {
		d, _ := failures.Peek(ctx, from)
		return false, !d.Allowed, d.RetryAfter
	}
	res, err := failures.Reserve(ctx, from, 1)
	if err != nil || !res.Allowed {
		return false, true, max(res.RetryAfter, time.Second)
	}
	if !tokenIs(token, s.adminToken()) {
		return false, false, 0
	}
	res.Cancel(ctx) // a right token is no failure
	return true, false, 0
}

// tokenIs reports whether got is the admin token want, in constant time;
// an empty token is never a token.
func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// adminFailures is how many wrong tokens a source address may send in
// any minute before the admin API refuses it until the oldest of them is
// a minute old: how many a burst of guesses gets compared.
const adminFailures = 10

// remoteIP is r's peer address without its port: the admin listener is
// private, so no proxy header is trusted.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) adminKey(w http.ResponseWriter, r *http.Request) {
	cfg := s.state().cfg
	q := r.URL.Query()
	key, limits := "", []sluice.Limit(nil)
	if name := q.Get("policy"); name != "" {
		p := cfg.Policy(name)
		if p == nil || q.Get("key") == "" {
			problem(w, http.StatusBadRequest, "unknown policy or no key", "policy")
			return
		}
		key = p.Name + "\x00" + q.Get("key")
		limits = s.overrides.LimitsFor(p, q.Get("key"), q.Get("plan"))
	} else {
		d := cfg.Domains[q.Get("domain")]
		if d == nil {
			problem(w, http.StatusBadRequest, "want policy and key, or domain and entry=k=v", "domain")
			return
		}
		var entries []config.Entry
		for _, e := range q["entry"] {
			k, v, _ := strings.Cut(e, "=")
			entries = append(entries, config.Entry{Key: k, Value: v})
		}
		n, values := d.Match(entries)
		if n == nil {
			problem(w, http.StatusNotFound, "no descriptor matches", "entry")
			return
		}
		key = descriptorKey(d.Name, entries, values)
		for _, l := range n.Limits {
			limits = append(limits, l.Limit)
		}
	}
	var out []DecisionJSON
	for _, l := range limits {
		if r.Method == http.MethodDelete {
			start := time.Now()
			err := s.store.Reset(r.Context(), key, l)
			s.metrics.storeCall("reset", time.Since(start), err)
			if err != nil {
				problem(w, http.StatusServiceUnavailable, err.Error(), "")
				return
			}
		}
		d, err := s.store.Take(r.Context(), sluice.Request{Key: key, Limit: l})
		if err != nil {
			problem(w, http.StatusServiceUnavailable, err.Error(), "")
			return
		}
		out = append(out, decisionJSON(d))
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"limits": out})
}

// adminSetOverride sets (PUT, a JSON body) or removes (DELETE, the query)
// a key's override. It answers once every instance has applied it, with
// how many did: 200 when all, 202 when some had not within two seconds.
func (s *Server) adminSetOverride(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Policy string   `json:"policy"`
		Key    string   `json:"key"`
		Limits []string `json:"limits"`
	}
	if r.Method == http.MethodPut {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			problem(w, http.StatusBadRequest, "body: "+err.Error()+`; want {"policy":"P","key":"K","limits":["1000/1m"]}`, "")
			return
		}
		if len(in.Limits) == 0 {
			problem(w, http.StatusBadRequest, "limits: give at least one; DELETE removes an override", "limits")
			return
		}
	} else {
		in.Policy, in.Key = r.URL.Query().Get("policy"), r.URL.Query().Get("key")
	}
	if s.state().cfg.Policy(in.Policy) == nil {
		problem(w, http.StatusBadRequest, fmt.Sprintf("unknown policy %q", in.Policy), "policy")
		return
	}
	if err := door.Identity(in.Key); err != nil {
		problem(w, http.StatusBadRequest, "key: "+err.Error(), "key")
		return
	}
	limits := make([]sluice.Limit, len(in.Limits))
	for i, t := range in.Limits {
		l, err := sluice.ParseLimit(t)
		if err != nil {
			problem(w, http.StatusBadRequest, fmt.Sprintf("limits[%d]: %v", i, strings.TrimPrefix(err.Error(), "sluice: ")), "limits")
			return
		}
		limits[i] = l
	}
	applied, err := s.overrides.Set(r.Context(), in.Policy, in.Key, limits)
	switch {
	case errors.Is(err, overrides.ErrInvalid):
		problem(w, http.StatusBadRequest, err.Error(), "limits")
		return
	case err != nil:
		problem(w, http.StatusServiceUnavailable, err.Error(), "")
		return
	}
	s.log.Info("admin: override "+map[bool]string{true: "set", false: "removed"}[len(limits) > 0],
		"policy", in.Policy, "key", shownKey(s.state().cfg, in.Policy, in.Key), "limits", strings.Join(in.Limits, "; "),
		"version", applied.Version, "instances", applied.Instances, "applied_by", applied.AppliedBy)
	status := http.StatusOK
	if applied.AppliedBy < applied.Instances {
		status = http.StatusAccepted
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(applied)
}

// Why the admin API or the status page refused a request for its token
// (sluice_admin_refused_total's reasons).
const (
	wrongToken = "wrong_token" // none, or not the admin token
	lockedOut  = "locked_out"  // from an address past adminFailures wrong tokens this minute
)

// refusedAdmin counts a request refused for reason, and logs msg with the
// caller's address: each wrong token (an address is locked out after
// adminFailures of them a minute, which bounds their lines), and locked
// out requests once a second at most, with how many were held back.
func (s *Server) refusedAdmin(reason, msg, from string, attrs ...any) {
	s.metrics.adminRefused.WithLabelValues(reason).Inc()
	if reason == lockedOut {
		ok, held := s.logs.Allow("admin: " + lockedOut)
		if !ok {
			return
		}
		attrs = append(attrs, "suppressed", held)
	}
	s.log.Warn(msg, append([]any{"remote", from}, attrs...)...)
}
