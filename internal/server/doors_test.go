package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/api/sluicev1"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/logbuf"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/memstore"
)

// doorsConfig is one policy keyed on an API key, which every door of
// sluice serve and sluice proxy applies, and an Envoy domain keyed on one.
const doorsConfig = `
policies:
  - {name: p, limit: fixed_window 100/1h, key: "header:X-API-Key", match: "/api/"}
domains:
  - domain: d
    descriptors:
      - key: api_key
        rate_limit: {unit: hour, requests_per_unit: 100}
`

// verdict is a door's answer in words common to every protocol.
type verdict string

const (
	allowed verdict = "allowed"
	refused verdict = "refused as invalid" // HTTP 400, gRPC InvalidArgument
)

// frontDoor sends one request naming identity id through a door and
// says how it was answered (anything but allowed or refused fails the
// test), and peeks what is left of id's limit there.
type frontDoor struct {
	send func(t *testing.T, id string) verdict
	peek func(t *testing.T, id string) int64
}

// TestEveryDoorOneIdentityRule sends the same identities, as an API key,
// through every front door: /v1/check, the native gRPC service, Envoy's
// rate limit service over gRPC and /json, /v1/forward-auth, sluice proxy,
// httplimit and grpclimit. Each good one is allowed and charged 1; each
// bad one (a control character, DEL, invalid UTF-8, 5,000 bytes) is
// refused as invalid (400, InvalidArgument) everywhere, charging nothing,
// and never reaches the proxy's upstream.
func TestEveryDoorOneIdentityRule(t *testing.T) {
	good := []string{"alice", "clé-7", "with\ttab", strings.Repeat("k", sluice.MaxIdentityLen)}
	bad := []string{"a\x01b", "a\x7fb", "a\xffb", "a\x00b", strings.Repeat("k", 5000)}
	doors, upstream := everyDoor(t)
	for name, d := range doors {
		for _, id := range append(good, bad...) {
			want := allowed
			if !containsString(good, id) {
				want = refused
			}
			before := d.peek(t, id)
			served := upstream.Load()
			got := d.send(t, id)
			charged := before - d.peek(t, id)
			switch {
			case got != want:
				t.Errorf("%s, identity %.20q (%d bytes): %s; want %s", name, id, len(id), got, want)
			case want == allowed && charged != 1, want == refused && charged != 0:
				t.Errorf("%s, identity %.20q (%d bytes): %s, charged %d", name, id, len(id), got, charged)
			case name == "sluice proxy" && want == refused && upstream.Load() != served:
				t.Errorf("%s, identity %.20q (%d bytes): forwarded to the upstream", name, id, len(id))
			}
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// everyDoor starts sluice serve (with /v1/forward-auth) and sluice proxy
// on doorsConfig, and httplimit and grpclimit on a policy of their own,
// and returns their doors and the count of requests the proxy's upstream
// served.
func everyDoor(t *testing.T) (map[string]frontDoor, *atomic.Int64) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listeners: {drain: 0s}\n"+doorsConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(&logbuf.Buffer{}, nil))
	var srv *Server
	deps := func() proxy.Deps {
		return proxy.Deps{Guard: srv.Guard(), Slots: srv.Slots(), Overrides: srv.Overrides(), Accounting: srv}
	}
	srv, err := New(Options{Config: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: log,
		ForwardAuth: func(cfg *config.Config) (http.Handler, error) { return proxy.ForwardAuth(cfg, deps(), log) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	base := "http://" + srv.Addrs().HTTP
	cfg := srv.state().cfg

	var served atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served.Add(1) }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	ph, err := proxy.New(cfg, deps(), u, log)
	if err != nil {
		t.Fatal(err)
	}
	px := httptest.NewServer(ph)
	t.Cleanup(px.Close)

	conn, err := grpc.NewClient(srv.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	// The server's doors share the store: a policy's counters and the
	// domain's.
	policy := cfg.Policy("p")
	peekPolicy := func(t *testing.T, id string) int64 { return peek(t, srv.store, "p\x00"+id, policy.Limits[0]) }
	node, _ := cfg.Domains["d"].Match([]config.Entry{{Key: "api_key", Value: "x"}})
	peekDomain := func(t *testing.T, id string) int64 {
		return peek(t, srv.store, descriptorKey("d", []config.Entry{{Key: "api_key", Value: id}}, nil), node.Limits[0].Limit)
	}
	viaHeader := func(method, url string, h http.Header) func(t *testing.T, id string) verdict {
		return func(t *testing.T, id string) verdict {
			return httpVerdict(t, method, url, h, id, nil)
		}
	}
	doors := map[string]frontDoor{
		"/v1/check": {func(t *testing.T, id string) verdict {
			body := `{"checks":[{"policy":"p","key":` + jsonText(id) + `}]}`
			return httpVerdict(t, "POST", base+"/v1/check", http.Header{"Content-Type": {"application/json"}}, "", []byte(body))
		}, peekPolicy},
		"/json": {func(t *testing.T, id string) verdict {
			body := `{"domain":"d","descriptors":[{"entries":[{"key":"api_key","value":` + jsonText(id) + `}]}]}`
			return httpVerdict(t, "POST", base+"/json", http.Header{"Content-Type": {"application/json"}}, "", []byte(body))
		}, peekDomain},
		"/v1/forward-auth": {viaHeader("GET", base+"/v1/forward-auth", http.Header{"X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/api/items"}}), peekPolicy},
		"sluice proxy":     {viaHeader("GET", px.URL+"/api/items", nil), peekPolicy},
		"native gRPC": {func(t *testing.T, id string) verdict {
			return grpcVerdict(t, conn, "/sluice.v1.CheckService/Check", id,
				&sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "p"}}}, new(sluicev1.CheckResponse))
		}, peekPolicy},
		"Envoy RLS gRPC": {func(t *testing.T, id string) verdict {
			req := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "api_key"}}}}}
			return grpcVerdict(t, conn, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", id, req, new(rlspb.RateLimitResponse))
		}, peekDomain},
	}
	doors["httplimit"], doors["grpclimit"] = middlewareDoors(t)
	return doors, &served
}

// middlewareDoors are httplimit and grpclimit in process, each on a
// policy p of its own keyed on an API key: a client's bytes reach them
// as they are (a network client of grpc-go refuses to send metadata that
// is not printable ASCII; net/http's server refuses control characters
// in a header).
func middlewareDoors(t *testing.T) (frontDoor, frontDoor) {
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
	hstore, gstore := memstore.New(memstore.Options{}), memstore.New(memstore.Options{})
	m, err := httplimit.New(httplimit.Options{Store: hstore, Policies: []httplimit.Policy{{Name: "p", Key: httplimit.APIKey("X-API-Key"), Limit: limit}}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	in, err := grpclimit.New(grpclimit.Options{Store: gstore, Policies: []grpclimit.Policy{{Name: "p", Key: grpclimit.Metadata("x-api-key"), Limit: limit}}})
	if err != nil {
		t.Fatal(err)
	}
	unary := in.Unary()
	httpDoor := frontDoor{func(t *testing.T, id string) verdict {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Api-Key"] = []string{id}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return statusVerdict(t, w.Code, w.Body.String())
	}, func(t *testing.T, id string) int64 { return peek(t, hstore, "p\x00"+id, limit) }}
	grpcDoor := frontDoor{func(t *testing.T, id string) verdict {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}})
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{"x-api-key": {id}})
		_, err := unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/m"}, func(context.Context, any) (any, error) { return nil, nil })
		return codeVerdict(t, err)
	}, func(t *testing.T, id string) int64 { return peek(t, gstore, "p\x00"+id, limit) }}
	return httpDoor, grpcDoor
}

// peek is what is left of limit on key in store, without taking any.
func peek(t *testing.T, store sluice.Store, key string, limit sluice.Limit) int64 {
	t.Helper()
	d, err := store.Take(context.Background(), sluice.Request{Key: key, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// httpVerdict sends a request, with id as its X-API-Key header unless
// it is empty, and reads its verdict.
func httpVerdict(t *testing.T, method, url string, h http.Header, id string, body []byte) verdict {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if id != "" {
		req.Header["X-Api-Key"] = []string{id} // as it is: Set would not check it either
	}
	resp, err := rawClient(req)
	if err != nil {
		t.Fatal(err)
	}
	return statusVerdict(t, resp.code, resp.body)
}

type rawResponse struct {
	code int
	body string
}

// rawClient sends req over a connection of its own, written by hand, so
// that a header value net/http's client would refuse to send (a control
// character) reaches the server as a client could send it.
func rawClient(req *http.Request) (rawResponse, error) {
	c, err := net.Dial("tcp", req.URL.Host)
	if err != nil {
		return rawResponse{}, err
	}
	defer c.Close()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", req.Method, req.URL.RequestURI(), req.URL.Host)
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	body, _ := io.ReadAll(req.Body)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	if _, err := c.Write(b.Bytes()); err != nil {
		return rawResponse{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return rawResponse{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return rawResponse{resp.StatusCode, string(data)}, nil
}

func statusVerdict(t *testing.T, code int, body string) verdict {
	t.Helper()
	switch code {
	case http.StatusOK:
		return allowed
	case http.StatusBadRequest:
		return refused
	}
	return verdict(fmt.Sprintf("status %d: %.200s", code, body))
}

func codeVerdict(t *testing.T, err error) verdict {
	t.Helper()
	switch status.Code(err) {
	case codes.OK:
		return allowed
	case codes.InvalidArgument:
		return refused
	}
	return verdict(fmt.Sprintf("gRPC %v", err))
}

// jsonText is s as a JSON string, its control characters escaped and
// every other byte as it is (encoding/json would write an invalid byte
// as U+FFFD).
func jsonText(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == '"' || c == '\\':
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// grpcVerdict calls method with req, whose one empty key string
// (sluicev1.Check.Key, or the descriptor entry's value) is id on the
// wire, as a client could send it (proto.Marshal refuses a string that
// is not UTF-8), and reads its verdict.
func grpcVerdict(t *testing.T, conn *grpc.ClientConn, method, id string, req, resp proto.Message) verdict {
	t.Helper()
	placeholder := strings.Repeat("\x1f", len(id)) // in no request but this one's key
	switch r := req.(type) {
	case *sluicev1.CheckRequest:
		r.Checks[0].Key = placeholder
	case *rlspb.RateLimitRequest:
		r.Descriptors[0].Entries[0].Value = placeholder
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	wire = bytes.Replace(wire, []byte(placeholder), []byte(id), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, method, rawMessage(wire), resp, grpc.ForceCodecV2(rawCodec{encoding.GetCodecV2("proto")}))
	return codeVerdict(t, err)
}

// rawMessage is a request's wire form, which rawCodec sends as it is.
type rawMessage []byte

// rawCodec sends a rawMessage as it is and decodes answers as the proto
// codec does.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}
