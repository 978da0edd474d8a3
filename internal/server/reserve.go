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

	"github.com/sluicehq/sluice"
)

// Reservations over the service's API: a check with "reserve" takes its
// cost now as an estimate, and POST /v1/settle (or /v1/cancel) settles it
// to the request's actual cost once that is known. They are kept in this
// instance's memory: the instance that reserved settles.
const (
	// reservationTTL is how long a reservation waits for its settlement;
	// one never settled keeps its estimate.
	reservationTTL = 5 * time.Minute
	// maxReservations bounds the open reservations; past it the oldest
	// expires early, keeping its estimate.
	maxReservations = 100_000
)

// reservation is one open reservation: what a check took, under which
// limits, and when.
type reservation struct {
	id             string
	policy, key    string // as the check named them
	storeKey       string
	limits         []sluice.Limit
	estimate       int64
	mode           sluice.FailMode
	took           bool // the check took the estimate: not failed open
	taken, expires time.Time
	el             *list.Element
}

// reservations are the open reservations, by id and oldest first.
type reservations struct {
	mu    sync.Mutex
	byID  map[string]*reservation
	order list.List
}

var (
	errNoReservation    = errors.New("no such reservation: unknown, expired or settled already")
	errOtherReservation = errors.New("the reservation is of another policy or key")
)

// open records a reservation and returns its id.
func (rs *reservations) open(r *reservation, now time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	r.id = hex.EncodeToString(b[:])
	r.expires = now.Add(reservationTTL)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID == nil {
		rs.byID = map[string]*reservation{}
	}
	rs.expire(now)
	for len(rs.byID) >= maxReservations {
		rs.drop(rs.order.Front().Value.(*reservation))
	}
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

func (rs *reservations) drop(r *reservation) {
	rs.order.Remove(r.el)
	delete(rs.byID, r.id)
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
