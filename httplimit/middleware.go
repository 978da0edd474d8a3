package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
)

// Options configures a Middleware.
type Options struct {
	// Store decides. Required.
	Store sluice.Store
	// Policies are checked in order; every one whose Pattern matches a
	// request applies to it. Required.
	Policies []Policy
	// Timeout, if positive, bounds each store call; set it for a remote
	// store. Default: only the request's context bounds it.
	Timeout time.Duration
	// ResetFormat of X-RateLimit-Reset. Default ResetUnix.
	ResetFormat ResetFormat
	// OnDenied, if set, answers denied requests (429) and requests failed
	// closed (503) instead of the default problem+json responses. The rate
	// headers are already set on w.
	OnDenied func(w http.ResponseWriter, r *http.Request, res *Result)
	// OnResult, if set, sees every decision (for metrics). It must be
	// cheap and safe for concurrent use.
	OnResult func(r *http.Request, res *Result)
	// Logger receives sampled denial and failure logs. Default: none.
	Logger *slog.Logger
	// LogsPerSecond bounds denial lines per policy. Default 1.
	LogsPerSecond int64
}

// Result is the outcome for one request.
type Result struct {
	// Policies applied, enforced and shadow, and their decisions.
	Policies  []*Policy
	Decisions []sluice.Decision
	// Closest is the index of the enforced decision closest to its limit,
	// or -1 when no enforced policy decided.
	Closest int
	// Denied reports that the request was answered 429; FailedClosed that
	// it was answered 503 because the store or a key failed.
	Denied, FailedClosed bool
	// ShadowDenied reports that a shadow policy would have denied.
	ShadowDenied bool
	// Err is the store or key error, if any.
	Err error
}

// Middleware limits HTTP requests by policy. Make it with New; it is safe
// for concurrent use.
type Middleware struct {
	opts     Options
	base     time.Time // wall time at New; now is base plus the monotonic time since
	policies []*Policy
	log      *sampler
	scratch  sync.Pool
}

// New validates opts and returns a Middleware.
func New(opts Options) (*Middleware, error) {
	if opts.Store == nil {
		return nil, errors.New("httplimit: no Store")
	}
	if len(opts.Policies) == 0 {
		return nil, errors.New("httplimit: no Policies")
	}
	if opts.LogsPerSecond <= 0 {
		opts.LogsPerSecond = 1
	}
	m := &Middleware{opts: opts, base: time.Now(), log: newSampler(opts.Logger, opts.LogsPerSecond)}
	seen := map[string]bool{}
	for i := range opts.Policies {
		p := opts.Policies[i] // a copy: the caller's slice stays theirs
		if err := p.prepare(); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("httplimit: two policies named %q", p.Name)
		}
		seen[p.Name] = true
		m.policies = append(m.policies, &p)
	}
	m.scratch.New = func() any { return new(scratch) }
	return m, nil
}

// now reads the clock for X-RateLimit-Reset: the monotonic clock only,
// half the cost of time.Now.
func (m *Middleware) now() time.Time { return m.base.Add(time.Since(m.base)) }

// scratch is one request's working memory, pooled so that the allowed
// path allocates as little as it can.
type scratch struct {
	res      Result
	policies [8]*Policy
	reqs     [8]sluice.Request
	ds       [8]sluice.Decision
	shadow   [8]*Policy
	sreqs    [8]sluice.Request
	sds      [8]sluice.Decision
	keys     []byte // every key of the request, back to back
	hdr      headerBuf
}

// Handler wraps next: the func(http.Handler) http.Handler form.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := m.scratch.Get().(*scratch)
		defer m.scratch.Put(s)
		if m.decide(w, r, s) {
			next.ServeHTTP(w, r)
		}
	})
}

// decide applies the policies to r and answers a denial itself. It reports
// whether the request may proceed.
func (m *Middleware) decide(w http.ResponseWriter, r *http.Request, s *scratch) bool {
	enforced, shadow := s.policies[:0], s.shadow[:0]
	reqs, sreqs := s.reqs[:0], s.sreqs[:0]
	s.keys = s.keys[:0]
	res := &s.res
	*res = Result{Closest: -1}
	failClosed := false
	for _, p := range m.policies {
		if !p.matches(r) {
			continue
		}
		req, err := m.request(r, p, s)
		if err != nil {
			if errors.Is(err, errBadCost) || errors.Is(err, errKeyTooLong) {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return false
			}
			res.Err = err
			failClosed = failClosed || (p.FailMode == sluice.FailClosed && !p.Shadow)
			m.log.note(r.Context(), slog.LevelError, p.Name, "rate limit key not found: check the client IP strategy and trusted proxies", slog.String("error", err.Error()))
			continue
		}
		if p.Shadow {
			shadow, sreqs = append(shadow, p), append(sreqs, req)
		} else {
			enforced, reqs = append(enforced, p), append(reqs, req)
		}
	}
	ds := s.ds[:len(reqs)]
	if len(reqs) > len(s.ds) {
		ds = make([]sluice.Decision, len(reqs))
	}
	if len(reqs) > 0 {
		if err := m.take(r.Context(), reqs, ds); err != nil {
			res.Err = err
			for _, p := range enforced {
				failClosed = failClosed || p.FailMode == sluice.FailClosed
			}
			m.log.note(r.Context(), slog.LevelWarn, enforced[0].Name, "rate limit store failed", slog.String("error", err.Error()))
			enforced, ds = enforced[:0], ds[:0]
		}
	}
	res.Policies, res.Decisions = enforced, ds
	if i := sluice.Most(ds); i >= 0 {
		res.Closest = i
		s.hdr.set(w.Header(), m.now(), m.opts.ResetFormat, i, enforced, ds)
		res.Denied = !ds[i].Allowed
	}
	if len(sreqs) > 0 {
		m.shadow(r, shadow, sreqs, s.sds[:0], res)
	}
	switch {
	case failClosed:
		res.FailedClosed = true
		m.report(r, res)
		m.refuse(w, r, res, http.StatusServiceUnavailable, time.Second)
		return false
	case res.Denied:
		d := ds[res.Closest]
		m.report(r, res)
		m.log.note(r.Context(), slog.LevelInfo, enforced[res.Closest].Name, "rate limited",
			slog.Duration("retry_after", d.RetryAfter), slog.String("method", r.Method), slog.String("path", r.URL.Path))
		m.refuse(w, r, res, http.StatusTooManyRequests, d.RetryAfter)
		return false
	}
	m.report(r, res)
	return m.shapeWait(r, enforced, ds)
}

// shapeWait sleeps the longest Delay of the shaping policies, and reports
// false if the client went away meanwhile.
func (m *Middleware) shapeWait(r *http.Request, policies []*Policy, ds []sluice.Decision) bool {
	var wait time.Duration
	for i, p := range policies {
		if p.Shape {
			wait = max(wait, ds[i].Delay)
		}
	}
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

var (
	errBadCost = errors.New("httplimit: bad request cost")
	// errKeyTooLong answers 400: an identity past sluice.MaxKeyLen (a huge
	// API key header, say) must not slip through unlimited by failing open.
	errKeyTooLong = errors.New("httplimit: request identity too long")
)

// request builds p's Request for r. Its key is "<policy>\x00<identity>",
// written into s.keys and not copied: stores do not retain keys.
func (m *Middleware) request(r *http.Request, p *Policy, s *scratch) (sluice.Request, error) {
	start := len(s.keys)
	keys := append(append(s.keys, p.Name...), 0)
	keys, err := p.Key(keys, r, p)
	if err != nil {
		return sluice.Request{}, err
	}
	s.keys = keys
	if len(keys)-start > sluice.MaxKeyLen {
		return sluice.Request{}, fmt.Errorf("%w: %d bytes, at most %d", errKeyTooLong, len(keys)-start, sluice.MaxKeyLen)
	}
	cost := p.Cost
	if p.CostFunc != nil {
		if cost, err = p.CostFunc(r); err != nil || cost < 0 || cost > p.Limit.Capacity() {
			return sluice.Request{}, fmt.Errorf("%w: %d, %v", errBadCost, cost, err)
		}
	}
	// An append that grew s.keys left earlier keys in the old array,
	// which stays alive and unchanged while they point into it.
	key := unsafe.String(&keys[start], len(keys)-start)
	return sluice.Request{Key: key, Limit: p.Limit, Cost: cost}, nil
}

func (m *Middleware) take(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) error {
	if m.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.opts.Timeout)
		defer cancel()
	}
	if len(reqs) == 1 {
		var err error
		ds[0], err = m.opts.Store.Take(ctx, reqs[0])
		return err
	}
	return m.opts.Store.TakeAll(ctx, reqs, ds)
}

// shadow decides the shadow policies apart, so that their denials never
// hold back the enforced ones, and records what they would have done.
func (m *Middleware) shadow(r *http.Request, policies []*Policy, reqs []sluice.Request, buf []sluice.Decision, res *Result) {
	ds := append(buf, make([]sluice.Decision, len(reqs))...)
	if err := m.take(r.Context(), reqs, ds); err != nil {
		m.log.note(r.Context(), slog.LevelWarn, policies[0].Name, "rate limit store failed (shadow)", slog.String("error", err.Error()))
		return
	}
	for i, d := range ds {
		if !d.Allowed {
			res.ShadowDenied = true
			m.log.note(r.Context(), slog.LevelInfo, policies[i].Name, "would rate limit (shadow)",
				slog.String("method", r.Method), slog.String("path", r.URL.Path))
		}
	}
	res.Policies = append(res.Policies[:len(res.Policies):len(res.Policies)], policies...)
	res.Decisions = append(res.Decisions[:len(res.Decisions):len(res.Decisions)], ds...)
}

func (m *Middleware) report(r *http.Request, res *Result) {
	if m.opts.OnResult != nil {
		m.opts.OnResult(r, res)
	}
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Policy     string `json:"policy,omitempty"`
	RetryAfter int64  `json:"retry_after"`
}

// refuse answers a denial or a closed failure, through OnDenied if set.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, res *Result, status int, retry time.Duration) {
	secs := retryAfterSeconds(retry)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	if m.opts.OnDenied != nil {
		m.opts.OnDenied(w, r, res)
		return
	}
	p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, RetryAfter: secs}
	if res.Closest >= 0 && status == http.StatusTooManyRequests {
		p.Policy = res.Policies[res.Closest].Name
		p.Detail = fmt.Sprintf("rate limit %q exceeded; retry in %d s", p.Policy, secs)
	} else {
		p.Detail = "the rate limiter is unavailable; retry shortly"
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
