package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/guard"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// serve starts a real gRPC server with the health service behind the
// interceptors, on loopback, and returns a client.
func serve(t *testing.T, opts grpclimit.Options) healthpb.HealthClient {
	t.Helper()
	ic, err := grpclimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary()), grpc.StreamInterceptor(ic.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestUnaryDeniesWithRetryInfo(t *testing.T) {
	c := serve(t, grpclimit.Options{Store: memstore.New(memstore.Options{}), Policies: []grpclimit.Policy{
		{Name: "check", Method: "/grpc.health.v1.Health/Check", Limit: sluice.PerMinute(3), Key: grpclimit.PeerAddr()},
	}})
	ctx := context.Background()
	for i := range 3 {
		var hdr metadata.MD
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := hdr.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != []string{"2", "1", "0"}[i] {
			t.Fatalf("call %d: x-ratelimit-remaining %v", i, got)
		}
	}
	var hdr, trailer metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("4th call: %v; want ResourceExhausted", err)
	}
	// Trailers only: headers would commit the call against gRPC's retry.
	if len(hdr) != 0 || len(trailer.Get("x-ratelimit-remaining")) != 1 || trailer.Get("x-ratelimit-remaining")[0] != "0" || len(trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("4th call: headers %v, trailers %v; want the rate numbers and grpc-retry-pushback-ms as trailers", hdr, trailer)
	}
	if retry := retryDelay(err); retry <= 0 || retry > 20*time.Second {
		t.Fatalf("RetryInfo delay %v; want (0, 20s] for 3/min", retry)
	}
}

func TestMetadataKeysAndServicePrefix(t *testing.T) {
	c := serve(t, grpclimit.Options{Store: memstore.New(memstore.Options{}), Policies: []grpclimit.Policy{
		{Name: "svc", Method: "/grpc.health.v1.Health/", Limit: sluice.PerMinute(1), Key: grpclimit.Metadata("x-api-key")},
	}})
	for _, key := range []string{"a", "b", "c"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "a")
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call for key a: %v", err)
	}
	// A stream opened under the same key is refused too.
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream for key a: %v", err)
	}
}

func TestFailClosedAndShadow(t *testing.T) {
	down, _ := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	defer down.Close()
	c := serve(t, grpclimit.Options{Store: down, Policies: []grpclimit.Policy{
		{Name: "p", Limit: sluice.PerMinute(100), Key: grpclimit.PeerAddr(), FailMode: sluice.FailClosed},
	}})
	var trailer metadata.MD
	_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("store down, fail-closed: %v; want Unavailable", err)
	}
	// Told to come back in a second, as HTTP's 503 says with Retry-After.
	if p := trailer.Get("grpc-retry-pushback-ms"); len(p) != 1 || p[0] != "1000" || retryDelay(err) != time.Second {
		t.Fatalf("store down, fail-closed: pushback %v, RetryInfo %v; want 1000 ms, 1s", p, retryDelay(err))
	}
	var shadowed atomic.Int64
	c = serve(t, grpclimit.Options{Store: memstore.New(memstore.Options{}), Policies: []grpclimit.Policy{
		{Name: "p", Limit: sluice.PerMinute(1), Key: grpclimit.PeerAddr(), Shadow: true},
	}, OnShadowDenied: func(string, string) { shadowed.Add(1) }})
	for range 3 {
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("shadow policy blocked: %v", err)
		}
	}
	if shadowed.Load() != 2 {
		t.Fatalf("shadow denials %d, want 2", shadowed.Load())
	}
}

// TestStreamsInFlight: a stream holds its concurrency slot until it ends;
// past the policy's concurrency a call fails ResourceExhausted.
func TestStreamsInFlight(t *testing.T) {
	c := serve(t, grpclimit.Options{Store: memstore.New(memstore.Options{}), Policies: []grpclimit.Policy{
		{Name: "watch", Method: "/grpc.health.v1.Health/Watch", Concurrency: 2, Key: grpclimit.Method()},
	}})
	var trailer metadata.MD // the last stream's
	open := func() (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
			trailer = s.Trailer()
		}
		return cancel, err
	}
	first, err := open()
	if err != nil {
		t.Fatal(err)
	}
	second, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if cancel, err := open(); status.Code(err) != codes.ResourceExhausted {
		cancel()
		t.Fatalf("third stream: %v; want ResourceExhausted", err)
	}
	if len(trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("third stream's trailers %v; want grpc-retry-pushback-ms", trailer)
	}
	first()
	var third context.CancelFunc
	for range 100 { // the server sees the cancellation shortly after
		if third, err = open(); err == nil {
			break
		}
		third()
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after one stream ended: %v", err)
	}
	second()
	third()
}

// TestConcurrencyOutcomes: a call refused or admitted by a concurrency
// policy alone is reported once to OnResult, with the store's failure
// when its fail mode decided.
func TestConcurrencyOutcomes(t *testing.T) {
	down, _ := redisstore.Open("redis://127.0.0.1:1", redisstore.Options{})
	defer down.Close()
	for _, tc := range []struct {
		mode sluice.FailMode
		code codes.Code
		want guard.Outcome
	}{
		{sluice.FailOpen, codes.OK, guard.FailedOpen},
		{sluice.FailClosed, codes.Unavailable, guard.FailedClosed},
	} {
		var got []guard.Outcome
		c := serve(t, grpclimit.Options{Store: down, Timeout: 200 * time.Millisecond, Policies: []grpclimit.Policy{
			{Name: "p", Concurrency: 2, Key: grpclimit.Method(), FailMode: tc.mode},
		}, OnResult: func(_ string, v *guard.Verdict) { got = append(got, v.Outcome) }})
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != tc.code {
			t.Fatalf("%v, store down: %v; want %v", tc.mode, err, tc.code)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Fatalf("%v, store down: reported %v; want once %v", tc.mode, got, tc.want)
		}
	}
}

// A gRPC client whose service config retries ResourceExhausted waits for
// what the server says (the grpc-retry-pushback-ms trailer, which gRPC's
// own retry reads; it ignores RetryInfo) instead of its backoff of a
// millisecond: its one retry is allowed. Without the trailer it spent its
// three attempts within a few milliseconds, every one refused.
func TestClientRetryWaitsForPushback(t *testing.T) {
	var attempts atomic.Int64
	ic, err := grpclimit.New(grpclimit.Options{
		Store: memstore.New(memstore.Options{}),
		Policies: []grpclimit.Policy{{
			Name: "check", Method: "/grpc.health.v1.Health/Check", Key: grpclimit.PeerAddr(),
			Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 4, Period: time.Second, Burst: 4},
		}},
		OnResult: func(string, *guard.Verdict) { attempts.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(ic.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
				"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	for i := range 4 {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	attempts.Store(0)
	var trailer metadata.MD
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trailer))
	if err != nil || attempts.Load() != 2 {
		t.Fatalf("the 5th call: %v after %d attempts (trailer %v); want allowed on its one retry", err, attempts.Load(), trailer)
	}
}

// retryDelay is the RetryInfo delay err carries; 0 for none.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.RetryDelay.AsDuration()
		}
	}
	return 0
}
