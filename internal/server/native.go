package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/api/sluicev1"
	"github.com/sluicehq/sluice/guard"
)

// native implements sluice.v1.CheckService: POST /v1/check over gRPC.
type native struct {
	sluicev1.UnimplementedCheckServiceServer
	s *Server
}

func (n *native) Check(ctx context.Context, req *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
	defer n.s.track()()
	checks := make([]Check, len(req.GetChecks()))
	for i, c := range req.GetChecks() {
		checks[i] = Check{Policy: c.Policy, Key: c.Key, Cost: c.Cost, Plan: c.Plan, Reserve: c.Reserve}
	}
	resp, field, err := n.s.runChecks(ctx, checks)
	if full := (*reservationsFull)(nil); errors.As(err, &full) {
		code := codes.Unavailable
		if full.status() == http.StatusTooManyRequests {
			code = codes.ResourceExhausted
		}
		return nil, status.Error(code, err.Error())
	}
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	if resp.failedClosed {
		return nil, status.Error(codes.Unavailable, "the rate limiter's store is unavailable and the policy fails closed; retry shortly")
	}
	out := &sluicev1.CheckResponse{Allowed: resp.Allowed}
	for _, r := range resp.Results {
		pr := &sluicev1.CheckResult{Policy: r.Policy, Key: r.Key, Shadow: r.Shadow, FailedOpen: r.FailedOpen, Error: r.Error, Reservation: r.Reservation}
		if t, err := time.Parse(time.RFC3339, r.ReservationExpires); err == nil {
			pr.ReservationExpires = timestamppb.New(t)
		}
		for _, d := range r.decisions {
			pr.Limits = append(pr.Limits, protoDecision(d))
		}
		if i := guard.Closest(r.decisions); i >= 0 {
			pr.Decision = protoDecision(r.decisions[i])
			pr.Decision.Allowed = r.Allowed // a shadow check is allowed
		}
		out.Results = append(out.Results, pr)
	}
	return out, nil
}

func (n *native) Settle(ctx context.Context, req *sluicev1.SettleRequest) (*sluicev1.SettleResponse, error) {
	return n.settle(ctx, req, req.GetCost())
}

func (n *native) Cancel(ctx context.Context, req *sluicev1.SettleRequest) (*sluicev1.SettleResponse, error) {
	if req.GetCost() != 0 {
		return nil, status.Error(codes.InvalidArgument, "cost: a cancellation takes none; settle with Settle")
	}
	return n.settle(ctx, req, 0)
}

func (n *native) settle(ctx context.Context, req *sluicev1.SettleRequest, actual int64) (*sluicev1.SettleResponse, error) {
	defer n.s.track()()
	resp, code, err := n.s.settle(ctx, SettleRequest{Reservation: req.GetReservation(), Policy: req.GetPolicy(), Key: req.GetKey()}, actual)
	switch code {
	case http.StatusOK:
		return &sluicev1.SettleResponse{Policy: resp.Policy, Key: resp.Key, Estimate: resp.Estimate, Charged: resp.Charged}, nil
	case http.StatusNotFound:
		return nil, status.Error(codes.NotFound, err.Error())
	case http.StatusConflict:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return nil, status.Error(codes.InvalidArgument, err.Error())
}

func protoDecision(d sluice.Decision) *sluicev1.Decision {
	return &sluicev1.Decision{
		Allowed: d.Allowed, Limit: d.Limit.String(), Remaining: d.Remaining,
		RetryAfter: durationpb.New(d.RetryAfter), ResetAfter: durationpb.New(d.ResetAfter), Delay: durationpb.New(d.Delay),
	}
}
