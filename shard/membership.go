package shard

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Membership lists the live members, by their peer (gRPC) addresses. The
// Store asks it every Interval and rebuilds the ring when the list changes.
type Membership interface {
	Members(ctx context.Context) []string
}

// Static is a fixed peer list, health-checked: a peer that fails
// staticFailures gRPC health checks in a row (each bounded by timeout)
// leaves the ring until it answers again, so one slow answer does not move
// keys. self is always a member; a peer listed twice counts once. Several
// instances may share one host on different ports. dial are the options
// of the connections to the peers (Auth.DialOptions); none: in clear.
func Static(self string, peers []string, timeout time.Duration, dial ...grpc.DialOption) Membership {
	all := slices.Compact(slices.Sorted(slices.Values(append([]string{self}, peers...))))
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	st := &static{self: self, peers: all, timeout: timeout, dial: dial, conns: map[string]*grpc.ClientConn{}, failures: map[string]int{}}
	for _, p := range all {
		st.failures[p] = staticFailures // not a member until it answers
	}
	return st
}

// reconnect is how peer connections retry: within a second, not gRPC's
// default of up to two minutes, so that a member that restarts on its
// address is seen again, and reached, at the next membership check.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: time.Second,
}

// staticFailures is how many health checks in a row a peer may fail
// before it leaves the ring.
const staticFailures = 2

// firstCheck bounds the first health check of each peer, which includes
// connecting to it: an instance that starts must see the peers that are
// up before it decides anything, or it decides their keys afresh.
const firstCheck = time.Second

type static struct {
	self     string
	peers    []string
	timeout  time.Duration
	dial     []grpc.DialOption
	mu       sync.Mutex
	conns    map[string]*grpc.ClientConn
	failures map[string]int // consecutive failed checks; guarded by mu
	checked  bool           // a first check was made; guarded by mu
}

func (s *static) conn(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append(slices.Clip(s.dial), grpc.WithConnectParams(reconnect))...)
	if err == nil {
		s.conns[addr] = c
	}
	return c, err
}

func (s *static) Members(ctx context.Context) []string {
	s.mu.Lock()
	timeout := s.timeout
	if !s.checked {
		timeout = max(timeout, firstCheck)
	}
	s.checked = true
	s.mu.Unlock()
	alive := make([]bool, len(s.peers))
	var wg sync.WaitGroup
	for i, p := range s.peers {
		if p == s.self {
			alive[i] = true
			continue
		}
		wg.Go(func() {
			c, err := s.conn(p)
			if err != nil {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := healthpb.NewHealthClient(c).Check(cctx, &healthpb.HealthCheckRequest{})
			alive[i] = err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, p := range s.peers {
		if alive[i] {
			s.failures[p] = 0
		} else if s.failures[p] < staticFailures {
			s.failures[p]++
		}
		if s.failures[p] < staticFailures {
			out = append(out, p)
		}
	}
	return out
}

// DNS resolves name (A/AAAA records, with port; or SRV when port is 0) on
// every call: a headless Kubernetes service, for example.
func DNS(name string, port int) Membership {
	return dnsMembership{name: name, port: port}
}

type dnsMembership struct {
	name string
	port int
}

func (d dnsMembership) Members(ctx context.Context) []string {
	var r net.Resolver
	var out []string
	if d.port == 0 {
		_, srvs, err := r.LookupSRV(ctx, "", "", d.name)
		if err != nil {
			return nil
		}
		for _, s := range srvs {
			out = append(out, net.JoinHostPort(s.Target, strconv.Itoa(int(s.Port))))
		}
	} else {
		addrs, err := r.LookupHost(ctx, d.name)
		if err != nil {
			return nil
		}
		for _, a := range addrs {
			out = append(out, net.JoinHostPort(a, strconv.Itoa(d.port)))
		}
	}
	slices.Sort(out)
	return out
}
