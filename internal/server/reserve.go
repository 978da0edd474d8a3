package server

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// Reservations over the service's API: a check with "reserve" takes its
// cost now as an estimate, and POST /v1/settle (or /v1/cancel) settles it
// to the request's actual cost once that is known. They are kept in this
// instance's memory: the instance that reserved settles.
//
// The open reservations are bounded in bytes (config.Reservations): all
// of them together, each policy's and each key's. A reservation's size
// (reservationSize) is held against the bounds before its check is
// decided, and a reservation that would pass one is refused having
// charged nothing (reservationsFull); an open one is never pushed out to
// make room for another. One never settled expires after
// reservationTTL, keeping its estimate.
const reservationTTL = 5 * time.Minute

// reservation is one open reservation: what a check took, under which
// limits, and when.
type reservation struct {
	id             string
	policy         string // the policy's name, from the config
	key            string // as the check named it: storeKey's suffix
	storeKey       string
	limits         []sluice.Limit
	estimate       int64
	mode           sluice.FailMode
	took           bool  // the check took the estimate: not failed open
	size           int64 // held against the bounds: reservationSize
	taken, expires time.Time
	el             *list.Element
}

// reservationSize is what the bounds count of a reservation on storeKey
// under n limits: its key twice (the reservation's, and the index of
// keys', which may outlive it while the key has others open), its limits,
// and reservationFixed.
func reservationSize(storeKey string, n int) int64 {
	return reservationFixed + 2*int64(len(storeKey)) + int64(n)*int64(unsafe.Sizeof(sluice.Limit{}))
}

// reservationFixed is the heap a reservation holds whatever its key: the
// struct, its list element, its id, and its entries in the indexes by id
// and by key, with the slack of their growth. TestReservationSize
// measures it.
const reservationFixed = 512

// reservations are the open reservations, by id and oldest first, and
// the bytes they hold, by policy and by key.
type reservations struct {
	mu       sync.Mutex
	byID     map[string]*reservation
	order    list.List
	bytes    int64            // held: the open reservations and those being decided
	policies map[string]int64 // bytes held by policy
	keys     map[string]int64 // bytes held by store key
}

var (
	errNoReservation    = errors.New("no such reservation: unknown, expired or settled already")
	errOtherReservation = errors.New("the reservation is of another policy or key")
)

// reservationsFull is a reservation refused because it would pass a
// bound: bound is the config field. The key's bound is the caller's own
// doing (429); a policy's or the service's is the service's capacity
// (503).
type reservationsFull struct {
	bound string // max_bytes_per_key, max_bytes_per_policy or max_bytes
	max   int64
}

func (e *reservationsFull) Error() string {
	whose := map[string]string{"max_bytes_per_key": "this key's", "max_bytes_per_policy": "this policy's", "max_bytes": "the service's"}[e.bound]
	return fmt.Sprintf("%s open reservations would pass reservations.%s (%d bytes): settle or cancel some, or wait for them to expire", whose, e.bound, e.max)
}

// status is the HTTP status of the refusal.
func (e *reservationsFull) status() int {
	if e.bound == "max_bytes_per_key" {
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// hold counts size against the bounds b of policy and storeKey, or
// refuses it with a *reservationsFull when it would pass one. What is
// held is opened (open) or released (release).
func (rs *reservations) hold(b config.Reservations, policy, storeKey string, size int64, now time.Time) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire(now)
	switch {
	case rs.keys[storeKey]+size > b.MaxBytesPerKey:
		return &reservationsFull{"max_bytes_per_key", b.MaxBytesPerKey}
	case rs.policies[policy]+size > b.MaxBytesPerPolicy:
		return &reservationsFull{"max_bytes_per_policy", b.MaxBytesPerPolicy}
	case rs.bytes+size > b.MaxBytes:
		return &reservationsFull{"max_bytes", b.MaxBytes}
	}
	if rs.keys == nil {
		rs.byID, rs.policies, rs.keys = map[string]*reservation{}, map[string]int64{}, map[string]int64{}
	}
	rs.keys[storeKey] += size
	rs.policies[policy] += size
	rs.bytes += size
	return nil
}

// release gives back what hold counted, for a reservation not opened.
func (rs *reservations) release(policy, storeKey string, size int64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.unhold(policy, storeKey, size)
}

// unhold takes size off the bounds' counts. The caller holds mu.
func (rs *reservations) unhold(policy, storeKey string, size int64) {
	if rs.keys[storeKey] -= size; rs.keys[storeKey] == 0 {
		delete(rs.keys, storeKey)
	}
	if rs.policies[policy] -= size; rs.policies[policy] == 0 {
		delete(rs.policies, policy)
	}
	rs.bytes -= size
}

// open records reservation r, whose r.size hold counted, and returns its
// id.
func (rs *reservations) open(r *reservation, now time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	r.id = hex.EncodeToString(b[:])
	r.expires = now.Add(reservationTTL)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.el = rs.order.PushBack(r)
	rs.byID[r.id] = r
	return r.id
}

// take removes and returns reservation id of policy and key; one of
// another policy or key stays.
func (rs *reservations) take(id, policy, key string, now time.Time) (*reservation, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.expire(now)
	r := rs.byID[id]
	switch {
	case r == nil:
		return nil, errNoReservation
	case r.policy != policy || r.key != key:
		return nil, errOtherReservation
	}
	rs.drop(r)
	return r, nil
}

// expire drops the reservations past their expiry. The caller holds mu.
func (rs *reservations) expire(now time.Time) {
	for e := rs.order.Front(); e != nil && !now.Before(e.Value.(*reservation).expires); e = rs.order.Front() {
		rs.drop(e.Value.(*reservation))
	}
}

// drop removes r and what it held. The caller holds mu.
func (rs *reservations) drop(r *reservation) {
	rs.order.Remove(r.el)
	delete(rs.byID, r.id)
	rs.unhold(r.policy, r.storeKey, r.size)
}

// stats returns how many reservations are open and the bytes held.
func (rs *reservations) stats() (open int, bytes int64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.byID), rs.bytes
}

// held are the sizes the reserving checks of one request hold against
// the bounds, by check: 0 for a check that holds none, or no more.
type held []int64

// holdReservations holds the size of every reserving check among checks
// (resolved as ns) against cfg's bounds before any is decided. When one
// would pass a bound it holds none, counts the refusal by bound, and
// returns the check's field and a *reservationsFull.
func (s *Server) holdReservations(cfg *config.Config, checks []Check, ns []nativeCheck) (held, string, error) {
	var h held
	now := time.Now()
	for i, c := range checks {
		if !c.Reserve {
			continue
		}
		if h == nil {
			h = make(held, len(checks))
		}
		size := reservationSize(ns[i].storeKey, len(ns[i].limits))
		if err := s.reserved.hold(cfg.Reservations, ns[i].p.Name, ns[i].storeKey, size, now); err != nil {
			h.release(s, ns)
			s.metrics.reservationsRefused.WithLabelValues(err.(*reservationsFull).bound).Inc()
			field := fmt.Sprintf("checks[%d]", i)
			return nil, field, fmt.Errorf("%s: %w", field, err)
		}
		h[i] = size
	}
	return h, "", nil
}

// take returns the size check i holds, for its open reservation to keep.
func (h held) take(i int) int64 {
	size := h[i]
	h[i] = 0
	return size
}

// release releases what the checks ns still hold: those that opened no
// reservation.
func (h held) release(s *Server, ns []nativeCheck) {
	for i, size := range h {
		if size > 0 {
			s.reserved.release(ns[i].p.Name, ns[i].storeKey, size)
			h[i] = 0
		}
	}
}

// reservationCollectors are the metrics of the open reservations: how
// many, the bytes they hold, and the bounds.
func (s *Server) reservationCollectors() []prometheus.Collector {
	out := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_open", Help: "Reservations of POST /v1/check open, waiting for /v1/settle or /v1/cancel."},
			func() float64 { n, _ := s.reserved.stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_bytes", Help: "Bytes the open reservations hold, as the reservations bounds count them."},
			func() float64 { _, b := s.reserved.stats(); return float64(b) }),
	}
	for bound, get := range map[string]func(config.Reservations) int64{
		"max_bytes":            func(r config.Reservations) int64 { return r.MaxBytes },
		"max_bytes_per_policy": func(r config.Reservations) int64 { return r.MaxBytesPerPolicy },
		"max_bytes_per_key":    func(r config.Reservations) int64 { return r.MaxBytesPerKey },
	} {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_max_bytes",
			Help:        "The reservations bounds in force, by bound: max_bytes (all), max_bytes_per_policy, max_bytes_per_key.",
			ConstLabels: prometheus.Labels{"bound": bound}},
			func() float64 { return float64(get(s.state().cfg.Reservations)) }))
	}
	return out
}

// SettleRequest is the body of POST /v1/settle and POST /v1/cancel.
type SettleRequest struct {
	Reservation string `json:"reservation"`
	Policy      string `json:"policy"`
	Key         string `json:"key"`
	// Cost is the request's actual cost; /v1/cancel takes none (0).
	Cost *int64 `json:"cost,omitempty"`
}

// SettleResponse answers a SettleRequest.
type SettleResponse struct {
	Policy   string `json:"policy"`
	Key      string `json:"key"`
	Estimate int64  `json:"estimate"`
	Charged  int64  `json:"charged"`
}

// settle settles reservation req.Reservation of req's policy and key to
// actual, through the Guard: each of its limits charged the difference,
// or given it back.
func (s *Server) settle(ctx context.Context, req SettleRequest, actual int64) (SettleResponse, int, error) {
	switch {
	case req.Reservation == "":
		return SettleResponse{}, http.StatusBadRequest, errors.New("reservation: required")
	case actual < 0:
		return SettleResponse{}, http.StatusBadRequest, fmt.Errorf("cost %d is negative", actual)
	case actual > 1<<53:
		return SettleResponse{}, http.StatusBadRequest, fmt.Errorf("cost %d is past 2^53", actual)
	}
	r, err := s.reserved.take(req.Reservation, req.Policy, req.Key, time.Now())
	switch {
	case errors.Is(err, errNoReservation):
		return SettleResponse{}, http.StatusNotFound, err
	case err != nil:
		return SettleResponse{}, http.StatusConflict, err
	}
	if r.took { // one that failed open counted nothing: there is nothing to move
		for _, l := range r.limits {
			s.guard.Settle(ctx, r.policy, sluice.Request{Key: r.storeKey, Limit: l}, r.taken, r.estimate, actual, r.mode)
		}
	}
	s.CountSettled(r.policy, r.estimate, actual, false)
	return SettleResponse{Policy: r.policy, Key: r.key, Estimate: r.estimate, Charged: actual}, http.StatusOK, nil
}

func (s *Server) handleSettle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Cost == nil {
		problem(w, http.StatusBadRequest, "cost: required, the request's actual cost (POST /v1/cancel gives the whole estimate back)", "cost")
		return
	}
	s.answerSettle(w, r, req, *req.Cost)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	if req.Cost != nil {
		problem(w, http.StatusBadRequest, "cost: a cancellation takes none; settle with POST /v1/settle", "cost")
		return
	}
	s.answerSettle(w, r, req, 0)
}

func (s *Server) answerSettle(w http.ResponseWriter, r *http.Request, req SettleRequest, actual int64) {
	defer s.track()()
	resp, status, err := s.settle(r.Context(), req, actual)
	if err != nil {
		problem(w, status, err.Error(), "")
		return
	}
	writeJSON(w, resp)
}
