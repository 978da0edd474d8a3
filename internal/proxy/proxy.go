// Package proxy is `sluice proxy`: a reverse proxy that applies the policy
// file's policies to the requests it forwards, through httplimit, with the
// same headers and 429s, and shaping (queueing) where a policy asks for it.
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/overrides"
	"github.com/sluicehq/sluice/internal/sample"
)

// Deps are what the proxy shares with the server it runs in.
type Deps struct {
	Guard *guard.Guard // decides the rate limits
	// Slots keeps the concurrency slots; nil takes the Guard's store's.
	Slots guard.Slots
	// Overrides are the limits set at runtime; nil: none.
	Overrides *overrides.Registry
	// Accounting counts what the proxy decides in the server it runs in
	// (its metrics and status page); nil: nothing is counted.
	Accounting Accounting
	// Transport is the connections to the upstream, kept across reloads;
	// nil: a new one, NewTransport(cfg.Listeners).
	Transport *http.Transport
}

// Accounting is what the proxy and forward-auth tell the server they run
// in of the requests they decide, so that those are in its metrics and
// status page: *server.Server implements it.
type Accounting interface {
	// CountCheck counts a check once under its policy, with its outcome,
	// the client's identity and the decision closest to its limit (nil
	// for none), decided at start.
	CountCheck(policy string, o guard.Outcome, identity string, closest *sluice.Decision, start time.Time)
	// CountSettled counts the settled charge of a request whose policy
	// charges by its answer: its estimate, what it was charged, and
	// whether the answer's cost could not be read.
	CountSettled(policy string, estimate, actual int64, unread bool)
	// NoteUnknownPlan counts and logs a request whose plan_from header
	// names a plan its policy does not have.
	NoteUnknownPlan(policy, plan string)
	// CountUpstreamFailure counts a request the upstream failed, once, by
	// reason: unreachable (answered 502), timeout (no headers in time:
	// 504), cut (its answer ended mid-body, and so did the client's).
	CountUpstreamFailure(reason string)
}

// accounting returns deps' Accounting, or one that counts nothing.
func (deps Deps) accounting() Accounting {
	if deps.Accounting == nil {
		return countNothing{}
	}
	return deps.Accounting
}

// countNothing is the Accounting of a proxy that runs in no server.
type countNothing struct{}

func (countNothing) CountCheck(string, guard.Outcome, string, *sluice.Decision, time.Time) {}
func (countNothing) CountSettled(string, int64, int64, bool)                               {}
func (countNothing) NoteUnknownPlan(string, string)                                        {}
func (countNothing) CountUpstreamFailure(string)                                           {}

// New returns a handler that limits by cfg's policies and forwards what it
// allows to upstream. Streaming responses are flushed as they come and
// websocket upgrades pass through (httputil.ReverseProxy).
func New(cfg *config.Config, deps Deps, upstream *url.URL, log *slog.Logger) (http.Handler, error) {
	d, err := newDecider(cfg, deps, log, nil, true)
	if err != nil {
		return nil, err
	}
	if d.m == nil {
		return nil, errors.New(`proxy: the config has no policy with a match to apply: a policy applies to the proxy's requests by its match ("/" for every request)`)
	}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.FlushInterval = -1 // stream responses as they come
	tr := deps.Transport
	if tr == nil {
		tr = NewTransport(cfg.Listeners)
	}
	logs := sample.New(1)
	acct := deps.accounting()
	rp.Transport = cutWatch{tr, func(r *http.Request, err error) {
		acct.CountUpstreamFailure("cut")
		if ok, held := logs.Allow("cut"); ok {
			log.Warn("sluice proxy: the upstream's answer was cut: its client got the part that came", "method", r.Method, "path", r.URL.Path,
				"error", err.Error(), "suppressed", held)
		}
	}}
	rp.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	rp.ErrorHandler = upstreamFailed(log, logs, acct)
	return d.handler(forward(rp)), nil
}

// cutWatch tells cut of an upstream answer whose body fails to read before
// its end while its client still waits: the client gets a cut answer
// (ReverseProxy aborts it), and ReverseProxy logs only at debug level. A
// protocol switch's body (a websocket) is left as it is: ReverseProxy
// needs it to be writable.
type cutWatch struct {
	http.RoundTripper
	cut func(*http.Request, error)
}

func (c cutWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.RoundTripper.RoundTrip(r)
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &watchedBody{ReadCloser: resp.Body, r: r, cut: c.cut}
	}
	return resp, err
}

// watchedBody is an answer's body that reports its first failed read.
type watchedBody struct {
	io.ReadCloser
	r    *http.Request
	cut  func(*http.Request, error)
	told bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !b.told && b.r.Context().Err() == nil {
		b.told = true
		b.cut(b.r, err)
	}
	return n, err
}

// NewTransport returns the connections to an upstream under l. A process
// makes one and gives it to each New (Deps.Transport), so that a reload
// keeps them; l is taken once, as the listeners section is.
func NewTransport(l config.Listeners) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// An upstream that sends no headers within the proxy timeout gets
	// its client a 504, not a connection the listener cuts.
	tr.ResponseHeaderTimeout = l.ProxyTimeout
	// Every request goes to the one upstream: keep a connection for each
	// of as many at once, where net/http keeps 2 and closes the rest after
	// their request (a new connection, and one in TIME_WAIT, per request
	// under load).
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = upstreamIdleConns, upstreamIdleConns
	// Close an idle connection before the upstream's keep-alive timeout
	// does: one it closes as a request goes out fails that request, and
	// net/http sends again only a request that is safe to repeat (not a
	// POST).
	tr.IdleConnTimeout = l.UpstreamIdleTimeout
	return tr
}

// upstreamIdleConns is how many idle connections the proxy keeps to its
// upstream, for as many requests at once.
const upstreamIdleConns = 256

// decider is the one request-to-policies step of the proxy and of
// forward-auth: a request's canonical form, the policies that match it,
// their key functions (the client address under trusted_proxies) and the
// fallback identity, decided through the Guard.
type decider struct {
	m          *httplimit.Middleware // nil without policies
	keyHeaders []string              // the headers the policies key on
	trusted    []netip.Prefix        // trusted_proxies
	log        *slog.Logger
	logs       *sample.Sampler // the untrusted-forwarding warning, sampled
}

// newDecider builds cfg's decider of the policies that have a match (one
// without is checked by name only, which the proxy logs); onDenied, if
// set, answers refusals instead of httplimit's 429 and 503. With answers,
// the policies that charge by the upstream's answer (cost.from,
// charge_status) settle from it, and concurrency holds a slot for the
// request's life; without (forward-auth, where the gateway never shows
// sluice the answer nor says when the request ends), they charge their
// estimate and hold no slot, as the log says once (ForwardAuthCaveats).
func newDecider(cfg *config.Config, deps Deps, log *slog.Logger, onDenied func(http.ResponseWriter, *http.Request, *httplimit.Result), answers bool) (*decider, error) {
	resolver, err := clientip.RemoteAddr(clientip.Options{})
	if err != nil {
		return nil, err
	}
	if len(cfg.TrustedProxies) > 0 {
		r, err := clientip.RightmostUntrusted("X-Forwarded-For", cfg.TrustedProxies, clientip.Options{})
		if err != nil {
			return nil, err
		}
		resolver = r.Or(resolver)
	}
	var policies []httplimit.Policy
	var keyHeaders []string
	for _, p := range cfg.Policies {
		if p.Match == "" {
			if answers {
				log.Warn("sluice proxy applies no policy without match: this one is checked by name only (match: \"/\" applies it to every request)", "policy", p.Name)
			}
			continue
		}
		if !answers {
			for _, c := range p.ForwardAuthCaveats() {
				log.Warn(c, "policy", p.Name)
			}
			if len(p.Limits) == 0 {
				continue // concurrency alone: nothing forward-auth can apply
			}
		}
		keyHeaders = append(keyHeaders, headersOf(p)...)
		key, err := keyFunc(p.Key, resolver)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		hp := httplimit.Policy{
			Name: p.Name, Pattern: p.Match, Key: key, Cost: p.Cost, CostFrom: p.CostFrom, CostUnread: p.CostUnread, ChargeStatus: p.ChargeStatus,
			FailMode: p.FailMode, Missing: p.Missing, Shadow: p.Shadow, Shape: p.Shape,
			Concurrency: p.Concurrency, ConcurrencyWait: p.ConcurrencyWait,
			Limits: limitsFor(p, deps.Overrides, deps.accounting()),
		}
		if len(p.Limits) > 0 {
			hp.Limit = p.Limits[0]
		}
		if !answers { // see ForwardAuthCaveats
			hp.ChargeStatus, hp.CostFrom, hp.CostUnread = nil, httplimit.CostSource{}, 0
			hp.Concurrency, hp.ConcurrencyWait = 0, 0
		}
		policies = append(policies, hp)
	}
	opts := httplimit.Options{Guard: deps.Guard, Slots: deps.Slots, Policies: policies, Logger: log, ClientIP: resolver, OnDenied: onDenied}
	// Without Accounting no hook is set: nothing runs after a decision.
	if acct := deps.Accounting; acct != nil {
		opts.OnResult = func(_ *http.Request, res *httplimit.Result) {
			if res.Label == "" {
				return // no policy applied
			}
			var closest *sluice.Decision
			if res.Closest >= 0 {
				closest = &res.Decisions[res.Closest]
			}
			acct.CountCheck(res.Label, res.Outcome, res.Identity, closest, time.Now())
		}
		opts.OnSettle = func(_ *http.Request, s httplimit.Settlement) {
			acct.CountSettled(s.Policy.Name, s.Estimate, s.Actual, s.Err != nil)
		}
	}
	if len(policies) == 0 {
		return &decider{}, nil // a config of Envoy domains only: nothing to apply
	}
	m, err := httplimit.New(opts)
	if err != nil {
		return nil, err
	}
	d := &decider{m: m, log: log, logs: sample.New(1)}
	for _, c := range cfg.TrustedProxies { // addresses or CIDRs, validated by config
		if p, err := netip.ParsePrefix(c); err == nil {
			d.trusted = append(d.trusted, p)
		} else if a, err := netip.ParseAddr(c); err == nil {
			d.trusted = append(d.trusted, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	slices.Sort(keyHeaders)
	d.keyHeaders = slices.Compact(keyHeaders)
	return d, nil
}

// handler decides each request and passes what the policies allow to next.
func (d *decider) handler(next http.Handler) http.Handler {
	if d.m == nil {
		return canonical(next, nil)
	}
	h := canonical(d.m.Handler(next), d.keyHeaders)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.noteUntrusted(r)
		h.ServeHTTP(w, r)
	})
}

// noteUntrusted warns, sampled, of a request that carries a forwarding
// header from a peer not in trusted_proxies: the header is ignored, so
// every client behind that peer shares its address, and one counter.
func (d *decider) noteUntrusted(r *http.Request) {
	if r.Header.Get("X-Forwarded-For") == "" && r.Header.Get("Forwarded") == "" {
		return
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return
	}
	for _, p := range d.trusted {
		if p.Contains(peer.Addr().Unmap()) {
			return
		}
	}
	if ok, held := d.logs.Allow("untrusted"); ok {
		d.log.Warn("a forwarding header from a peer not in trusted_proxies was ignored: every client behind it shares its address, and one limit; add the peer to trusted_proxies if it is your gateway",
			"peer", peer.Addr().String(), "trusted_proxies", len(d.trusted), "suppressed", held)
	}
}

// headersOf returns the headers p's key and plan are read from.
func headersOf(p *config.Policy) []string {
	var hs []string
	for _, part := range strings.Split(p.Key, "+") {
		if name, arg, _ := strings.Cut(strings.TrimSpace(part), ":"); name == "header" || name == "user" {
			hs = append(hs, http.CanonicalHeaderKey(arg))
		}
	}
	if src, h, _ := strings.Cut(p.PlanFrom, ":"); src == "header" && h != "" {
		hs = append(hs, http.CanonicalHeaderKey(h))
	}
	return hs
}

// limitsFor returns the limits of a request under p: an override set at
// runtime, else p's override, plan (from PlanFrom) or limits. A plan p
// does not have is told to acct.
func limitsFor(p *config.Policy, runtime *overrides.Registry, acct Accounting) func(*http.Request, string) []sluice.Limit {
	_, planHeader, _ := strings.Cut(p.PlanFrom, ":")
	return func(r *http.Request, identity string) []sluice.Limit {
		var plan string
		if planHeader != "" {
			plan = r.Header.Get(planHeader)
		}
		if plan != "" && !p.HasPlan(plan) {
			acct.NoteUnknownPlan(p.Name, plan)
		}
		return runtime.LimitsFor(p, identity, plan)
	}
}

// upstreamFailed answers a request the upstream could not: 504 when it
// timed out, 502 otherwise, with a problem+json body, and logs it sampled
// (one line a second, with the count held back). The request was already
// counted against its client's limit, as every request that reached the
// proxy is: an upstream that fails is no reason to give a client more
// (docs/http.md).
func upstreamFailed(log *slog.Logger, logs *sample.Sampler, acct Accounting) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client went away: nobody to answer
		}
		status, title, reason := http.StatusBadGateway, "the upstream failed", "unreachable"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			status, title, reason = http.StatusGatewayTimeout, "the upstream did not answer in time", "timeout"
		}
		acct.CountUpstreamFailure(reason)
		if ok, held := logs.Allow("upstream"); ok {
			log.Warn("sluice proxy: upstream failed", "status", status, "method", r.Method, "path", r.URL.Path,
				"error", err.Error(), "suppressed", held)
		}
		problem(w, status, title)
	}
}

// problem answers status with an RFC 9457 problem+json body.
func problem(w http.ResponseWriter, status int, detail string) {
	body, _ := json.Marshal(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// keyFunc turns a config key spec into a KeyFunc.
func keyFunc(spec string, resolver *clientip.Resolver) (httplimit.KeyFunc, error) {
	if err := config.ValidateKeySpec(spec); err != nil {
		return nil, err
	}
	var parts []httplimit.KeyFunc
	for _, part := range strings.Split(spec, "+") {
		name, arg, _ := strings.Cut(strings.TrimSpace(part), ":")
		switch name {
		case "client_ip":
			parts = append(parts, httplimit.ClientIP(resolver))
		case "header", "user":
			parts = append(parts, httplimit.APIKey(arg))
		case "user_agent":
			parts = append(parts, httplimit.UserAgent())
		case "route":
			parts = append(parts, httplimit.Route())
		}
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return httplimit.Compose(parts...), nil
}
