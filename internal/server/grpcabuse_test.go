package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// h2conn is a raw HTTP/2 client connection to the gRPC listener, for
// sending what no gRPC client would.
type h2conn struct {
	c   net.Conn
	w   *bufio.Writer
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func dialH2(t testing.TB, addr string) *h2conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &h2conn{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	h.fr = http2.NewFramer(h.w, c)
	h.fr.SetMaxReadFrameSize(1 << 20)
	h.enc = hpack.NewEncoder(&h.hb)
	io.WriteString(h.w, http2.ClientPreface)
	h.fr.WriteSettings()
	h.w.Flush()
	return h
}

// open sends a ShouldRateLimit call's headers on stream id, and extra
// ones after them.
func (h *h2conn) open(id uint32, endStream bool, extra ...[2]string) {
	h.hb.Reset()
	for _, f := range append([][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"}}, extra...) {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hb.Bytes(), EndHeaders: true, EndStream: endStream})
}

// awaitEnd reads frames until every stream in open has ended (reset, or
// answered to its end), answering the server's settings and pings.
func (h *h2conn) awaitEnd(open map[uint32]bool) error {
	for len(open) > 0 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("%d calls still open when the connection ended: %v", len(open), err)
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			delete(open, f.StreamID)
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				delete(open, f.StreamID)
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
				h.w.Flush()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
				h.w.Flush()
			}
		}
	}
	return nil
}

// A stalled call that carries its own deadline (grpc-timeout, as Envoy
// sends) is not watched, and needs no watch: it is ended at its deadline,
// long before the receive deadline, and a well-behaved call beside it is
// answered.
func TestStalledCallEndsAtItsDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a receive deadline")
	}
	r := start(t, "listeners: {read_timeout: 1h}\npolicies: [{name: p, limit: 1000000/1h}]", "")
	h := dialH2(t, r.Addrs().GRPC)
	defer h.c.Close()
	const calls = 20
	for i := range uint32(calls) {
		id := 2*i + 1
		h.open(id, false, [2]string{"grpc-timeout", "200m"})
		h.fr.WriteData(id, false, []byte{0, 0, 0, 0, 100}) // a 100-byte message, never sent
	}
	h.w.Flush()
	h.c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // a failure, not a hang, if no call ends
	open := map[uint32]bool{}
	for i := range uint32(calls) {
		open[2*i+1] = true
	}
	if err := h.awaitEnd(open); err != nil {
		t.Fatal(err)
	}
	checkRLS(t, r.Addrs().GRPC)
	if got := metricValue(t, r, `sluice_grpc_refused_total{reason="receive_timeout"}`); got != 0 {
		t.Fatalf("receive timeouts counted: %v; want none (each call ended at its own deadline)", got)
	}
}

// The watch holds only the calls that its deadline would end first.
func TestReceiveWatchSkipsEarlierDeadlines(t *testing.T) {
	w := newReceiveWatch(time.Minute, func(string) {})
	defer w.stop()
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: none
		watched bool
	}{{"no deadline", 0, true}, {"a deadline after the watch's", time.Hour, true}, {"a deadline before", time.Second, false}} {
		parent, cancel := context.Background(), context.CancelFunc(func() {})
		if tc.timeout > 0 {
			parent, cancel = context.WithTimeout(parent, tc.timeout)
		}
		ctx, _ := w.tap(parent, nil)
		w.mu.Lock()
		n := len(w.calls)
		w.mu.Unlock()
		if (n == 1) != tc.watched || (ctx == parent) == tc.watched {
			t.Errorf("%s: %d calls watched, context replaced %v; want watched %v", tc.name, n, ctx != parent, tc.watched)
		}
		w.arrived(ctx)
		cancel()
	}
}

// HTTP/2 rapid reset (HEADERS then RST_STREAM, as fast as the client can
// write them) is answered with a GOAWAY and the connection closed, and a
// well-behaved client beside it keeps being answered.
func TestRapidResetGoesAway(t *testing.T) {
	r := start(t, "policies: [{name: p, limit: 1000000/1h}]", "")
	addr := r.Addrs().GRPC
	h := dialH2(t, addr)
	defer h.c.Close()
	goAway := make(chan *http2.GoAwayFrame, 1)
	go func() {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				close(goAway)
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goAway <- g
				return
			}
		}
	}()
	for id := uint32(1); id < 1<<30; id += 2 {
		h.open(id, false)
		h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		if id%200 == 1 {
			if err := h.w.Flush(); err != nil {
				break // the server closed the connection
			}
		}
		select {
		case g, ok := <-goAway:
			if !ok {
				t.Fatal("the connection closed without a GOAWAY")
			}
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v; want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			t.Logf("GOAWAY after %d streams opened and reset", (id+1)/2)
			if got := metricValue(t, r, `sluice_grpc_refused_total{reason="too_many_resets"}`); got != 1 {
				t.Fatalf("too_many_resets counted %v times; want 1", got)
			}
			checkRLS(t, addr)
			return
		default:
		}
	}
	g, ok := <-goAway
	if !ok || g.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("no GOAWAY (ENHANCE_YOUR_CALM): %v", g)
	}
}

// A client that cancels its calls now and then is never sent away: 3,000
// calls, each cancelled as it starts, at the pace of one client.
func TestCancellingClientStays(t *testing.T) {
	r := start(t, "policies: [{name: p, limit: 1000000/1h}]", "")
	conn, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for i := range 3000 {
		ctx, cancel := context.WithCancel(context.Background())
		if i%2 == 0 {
			cancel() // before it is sent
		} else {
			go cancel() // while it is in flight
		}
		c.ShouldRateLimit(ctx, req)
		cancel()
	}
	if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatalf("after 3,000 cancelled calls: %v", err)
	}
	if got := metricValue(t, r, `sluice_grpc_refused_total{reason="too_many_resets"}`); got != 0 {
		t.Fatalf("a cancelling client was sent away %v times", got)
	}
}

func checkRLS(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err != nil {
		t.Fatalf("a well-behaved client: %v", err)
	}
}

// waitFor polls cond until it holds, for up to two minutes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within two minutes", what)
		}
		time.Sleep(50 * time.Millisecond) // polling for the condition
	}
}

// metricValue is the value of one series of /metrics, 0 when absent.
func metricValue(t *testing.T, r *running, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(r.metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
