package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/internal/door"
)

func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", s.handleCheck)
	mux.HandleFunc("POST /v1/settle", s.handleSettle)
	mux.HandleFunc("POST /v1/cancel", s.handleCancel)
	mux.HandleFunc("POST /json", s.handleEnvoyJSON)
	mux.HandleFunc("/v1/forward-auth", s.handleForwardAuth)
	s.ops(mux)
	return mux
}

// ops adds the operator's endpoints to mux: health, readiness and
// metrics.
func (s *Server) ops(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.handleReady)
	// envoyproxy/ratelimit's probe: 200 "OK" while serving, 500 once
	// draining.
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "draining", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "OK")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
}

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Checks []Check `json:"checks"`
}

// Check asks for one decision: a policy's limits on a key.
type Check struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// Cost defaults to the policy's cost (1); 0 peeks.
	Cost *int64 `json:"cost,omitempty"`
	// Plan chooses among the policy's plans; none, or an unknown one,
	// means its own limits (an unknown one is counted and logged:
	// NoteUnknownPlan). An override of the key comes first.
	Plan string `json:"plan,omitempty"`
	// Reserve takes Cost as an estimate to settle later (POST /v1/settle,
	// /v1/cancel): an allowed check's result carries the reservation.
	Reserve bool `json:"reserve,omitempty"`
}

// CheckResponse answers a CheckRequest, one result per check.
type CheckResponse struct {
	// Allowed is true when every check is.
	Allowed bool          `json:"allowed"`
	Results []CheckResult `json:"results"`

	failedClosed bool // a check was refused by fail_mode closed
}

// CheckResult is one check's decision: the limit closest to its limit,
// and every limit's decision.
type CheckResult struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	DecisionJSON
	Shadow bool `json:"shadow,omitempty"`
	// FailedOpen reports that the store failed and the policy's fail mode
	// (open) allowed the check without deciding it.
	FailedOpen bool `json:"failed_open,omitempty"`
	// Local reports that the store failed and the policy's fail mode
	// (local) decided the check in this instance's memory.
	Local  bool           `json:"local,omitempty"`
	Limits []DecisionJSON `json:"limits"`
	Error  string         `json:"error,omitempty"`
	// Reservation, for an allowed check that asked to reserve, is the id
	// that settles it, until ReservationExpires (RFC 3339): a reservation
	// not settled by then keeps its estimate.
	Reservation        string `json:"reservation,omitempty"`
	ReservationExpires string `json:"reservation_expires,omitempty"`

	decisions []sluice.Decision // for the gRPC form
}

// DecisionJSON is a sluice.Decision in JSON: durations in milliseconds.
type DecisionJSON struct {
	Allowed      bool    `json:"allowed"`
	Limit        string  `json:"limit,omitempty"`
	Remaining    int64   `json:"remaining"`
	RetryAfterMS float64 `json:"retry_after_ms"`
	ResetAfterMS float64 `json:"reset_after_ms"`
	DelayMS      float64 `json:"delay_ms"`
}

func decisionJSON(d sluice.Decision) DecisionJSON {
	return DecisionJSON{
		Allowed: d.Allowed, Limit: d.Limit.String(), Remaining: d.Remaining,
		RetryAfterMS: float64(d.RetryAfter.Microseconds()) / 1000,
		ResetAfterMS: float64(d.ResetAfter.Microseconds()) / 1000,
		DelayMS:      float64(d.Delay.Microseconds()) / 1000,
	}
}

// decodeJSON reads r's body, one JSON object of v's fields and nothing
// after it, into v, answering a problem itself when it cannot.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json", "")
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		problem(w, http.StatusBadRequest, "body: "+err.Error(), "")
		return false
	}
	if !utf8.Valid(body) {
		problem(w, http.StatusBadRequest, "body is not valid UTF-8", "")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		problem(w, http.StatusBadRequest, "malformed JSON body: "+err.Error(), "")
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		problem(w, http.StatusBadRequest, "malformed JSON body: one JSON object, with nothing after it", "")
		return false
	}
	return true
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	var req CheckRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	defer s.track()()
	resp, field, err := s.runChecks(r.Context(), req.Checks)
	if full := (*reservationsFull)(nil); errors.As(err, &full) {
		problem(w, full.status(), err.Error(), field)
		return
	}
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error(), field)
		return
	}
	if resp.failedClosed {
		// A policy's fail_mode closed refused: the service cannot decide.
		// Its error stays in the log; the client learns when to retry.
		w.Header().Set("Retry-After", strconv.Itoa(int(door.UnavailableRetry/time.Second)))
		problem(w, http.StatusServiceUnavailable, "the rate limiter's store is unavailable and the policy fails closed; retry shortly", "")
		return
	}
	writeJSON(w, resp)
}

// runChecks decides checks for POST /v1/check and the native gRPC
// service. An input problem is returned as an error with the field. Each
// check is decided on its own (its limits all-or-nothing), but a request
// refused whole charges none of them: every check's input is checked
// before any is decided, and when one fails closed, or the store finds
// one bad, what the others took is given back (giveBackChecks) and no
// reservation is opened.
func (s *Server) runChecks(ctx context.Context, checks []Check) (CheckResponse, string, error) {
	if len(checks) == 0 || len(checks) > maxChecks {
		return CheckResponse{}, "checks", fmt.Errorf("%d checks: want 1 to %d", len(checks), maxChecks)
	}
	cfg := s.state().cfg
	ns := make([]nativeCheck, len(checks))
	for i, c := range checks {
		field := fmt.Sprintf("checks[%d]", i)
		if c.Cost != nil && *c.Cost < 0 {
			return CheckResponse{}, field + ".cost", fmt.Errorf("%s.cost %d is negative", field, *c.Cost)
		}
		if err := door.Identity(c.Key); err != nil {
			return CheckResponse{}, field + ".key", fmt.Errorf("%s.key: %v", field, err)
		}
		n, err := s.resolve(cfg, c)
		if err != nil {
			return CheckResponse{}, field, fmt.Errorf("%s: %v", field, err)
		}
		if c.Reserve && n.cost == 0 {
			return CheckResponse{}, field + ".cost", fmt.Errorf("%s.cost: a reservation's estimate must be at least 1 (a check without reserve peeks at cost 0)", field)
		}
		ns[i] = n
	}
	held, field, err := s.holdReservations(cfg, checks, ns)
	if err != nil {
		return CheckResponse{}, field, err
	}
	defer held.release(s, ns)
	outs := make([]outcome, len(checks))
	for i := range ns {
		outs[i] = s.checkPolicy(ctx, ns[i])
		if out := outs[i]; out.Err != nil {
			s.giveBackChecks(ctx, ns[:i], outs[:i])
			if errors.Is(out.Err, errInput) {
				field := fmt.Sprintf("checks[%d]", i)
				return CheckResponse{}, field, fmt.Errorf("%s: %v", field, out.Err)
			}
			// Only a store failure under fail_mode closed gets here: its
			// detail (an address, say) is for the log, not the client.
			return CheckResponse{failedClosed: true}, "", nil
		}
	}
	resp := CheckResponse{Allowed: true, Results: make([]CheckResult, len(checks))}
	for i, out := range outs {
		c := checks[i]
		res := CheckResult{Policy: c.Policy, Key: c.Key, Shadow: out.Shadow, FailedOpen: out.Result == guard.FailedOpen,
			Local: out.Result == guard.LocalAllowed || out.Result == guard.LocalDenied}
		res.DecisionJSON = decisionJSON(out.Decisions[out.Closest])
		res.decisions = out.Decisions
		for _, d := range out.Decisions {
			res.Limits = append(res.Limits, decisionJSON(d))
		}
		res.Allowed = res.Allowed || out.Shadow
		if c.Reserve && out.Decisions[out.Closest].Allowed {
			n := &ns[i]
			r := &reservation{policy: n.p.Name, key: n.storeKey[len(n.p.Name)+1:], storeKey: n.storeKey,
				estimate: n.cost, mode: n.p.FailMode, taken: out.Taken, took: out.Took, size: held.take(i),
				limits: make([]sluice.Limit, 0, len(out.Decisions))}
			for _, d := range out.Decisions {
				r.limits = append(r.limits, d.Limit) // the limits that decided it
			}
			res.Reservation = s.reserved.open(r, time.Now())
			res.ReservationExpires = r.expires.UTC().Format(time.RFC3339)
		}
		resp.Allowed = resp.Allowed && res.Allowed
		resp.Results[i] = res
	}
	return resp, "", nil
}

// handleEnvoyJSON serves envoyproxy/ratelimit's /json: a RateLimitRequest
// in proto3 JSON, answered as JSON, 429 when over the limit.
func (s *Server) handleEnvoyJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		problem(w, http.StatusBadRequest, "body: "+err.Error(), "")
		return
	}
	var req rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		problem(w, http.StatusBadRequest, "malformed RateLimitRequest: "+err.Error(), "")
		return
	}
	defer s.track()()
	resp, err := (&rls{s: s}).ShouldRateLimit(r.Context(), &req)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	out, _ := protojson.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// handleReady serves /readyz on the public listeners: ready or not, and
// why in words that name no address and carry no error text (those are
// on the admin listener's /admin/readyz, and in the log).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	status, public, _ := s.readiness(r.Context())
	if status != http.StatusOK {
		http.Error(w, public, status)
		return
	}
	io.WriteString(w, public)
}

// readiness reports whether the server is ready: the status to answer,
// what a public listener may say, and the details for the admin.
func (s *Server) readiness(ctx context.Context) (status int, public, detail string) {
	if !s.ready.Load() {
		return http.StatusServiceUnavailable, "draining: shutting down", "draining: shutting down"
	}
	// Not ready while the breaker is open (checks are decided by
	// fail_mode without asking the store), nor while the preflight says
	// this Redis user may not decide. The store is reachable when a peek
	// answers, and a Redis store when every primary does.
	h := s.guard.Health()
	refused, warnPublic, warnDetail := s.preflight.problems()
	if refused {
		return http.StatusServiceUnavailable, "store refuses sluice's decision (preflight: " + strings.Join(warnPublic, ", ") + ")",
			"store refuses sluice's decision: " + strings.Join(warnDetail, "; ")
	}
	if h.Breaker == "open" {
		return http.StatusServiceUnavailable, "store failing (breaker open)",
			fmt.Sprintf("store failing since %v (breaker open): %s", h.Since.Format(time.RFC3339), h.LastError)
	}
	warnings := func(lines []string) string {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("warning: " + l + "\n")
		}
		return b.String()
	}
	ctx, cancel := context.WithTimeout(ctx, s.state().cfg.Store.Timeout)
	defer cancel()
	if s.probe != nil {
		line, err := s.probe(ctx)
		if err != nil {
			return http.StatusServiceUnavailable, fmt.Sprintf("store: %s (breaker %s)", line, h.Breaker),
				fmt.Sprintf("store: %s (breaker %s): %v", line, h.Breaker, err)
		}
		ok := fmt.Sprintf("ready\nstore: %s, %s\nbreaker: %s\n", s.storeType, line, h.Breaker)
		return http.StatusOK, ok + warnings(warnPublic), ok + warnings(warnDetail)
	}
	if _, err := s.store.Take(ctx, sluice.Request{Key: "sluice:readyz", Limit: sluice.PerSecond(1)}); err != nil {
		return http.StatusServiceUnavailable, fmt.Sprintf("store unreachable (breaker %s)", h.Breaker),
			fmt.Sprintf("store unreachable (breaker %s): %v", h.Breaker, err)
	}
	ok := fmt.Sprintf("ready\nstore: %s\nbreaker: %s\n", s.storeType, h.Breaker)
	return http.StatusOK, ok, ok
}

// problem writes an RFC 9457 problem details body.
func problem(w http.ResponseWriter, status int, detail, field string) {
	body := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail}
	if field != "" {
		body["field"] = field
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}
