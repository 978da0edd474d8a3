package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes what exporters
// post to /v1/traces and keeps the spans' names and trace ids.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]string // span name -> trace id (hex)
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		body, _ = io.ReadAll(zr)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				o.spans[sp.Name] = bytesHex(sp.TraceId)
			}
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(out)
}

func bytesHex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// With only OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_PROTOCOL
// set, a check's span, in the trace its caller sent (W3C traceparent), and
// the store call's child span reach an OTLP/HTTP receiver within 3 s.
func TestTracesReachOTLP(t *testing.T) {
	rec := &otlpReceiver{spans: map[string]string{}}
	collector := httptest.NewServer(rec)
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	r := start(t, "policies: [{name: p, limit: 10/1m}]", "")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", r.base+"/v1/check", bytes.NewReader([]byte(`{"checks":[{"policy":"p","key":"k"}]}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("check: %v %v", resp, err)
	}
	resp.Body.Close()
	sent := time.Now()
	for {
		rec.mu.Lock()
		check, store := rec.spans["sluice.check"], rec.spans["sluice.store.take"]
		rec.mu.Unlock()
		if check != "" && store != "" {
			if check != traceID || store != traceID {
				t.Fatalf("spans in traces %s and %s; want the caller's %s", check, store, traceID)
			}
			break
		}
		if time.Since(sent) > 30*time.Second {
			t.Fatalf("no check and store spans 30s after the check: %v", rec.spans)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// With no OTEL_* variable, tracing is off: nothing is installed.
func TestTracingOffByDefault(t *testing.T) {
	r := start(t, "policies: [{name: p, limit: 10/1m}]", "")
	if r.tracing != nil {
		t.Fatal("tracing on with no OTEL_* variable")
	}
}

// otlpGRPC is an OTLP/gRPC trace receiver.
type otlpGRPC struct {
	coltracepb.UnimplementedTraceServiceServer
	rec *otlpReceiver
}

func (o *otlpGRPC) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.rec.mu.Lock()
	defer o.rec.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				o.rec.spans[sp.Name] = bytesHex(sp.TraceId)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Over OTLP/gRPC too, and a gRPC check's trace context is taken from its
// metadata.
func TestTracesReachOTLPOverGRPC(t *testing.T) {
	rec := &otlpReceiver{spans: map[string]string{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, &otlpGRPC{rec: rec})
	go gs.Serve(ln)
	defer gs.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	r := start(t, "domains: [{domain: d, descriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 5}}]}]", "")
	conn, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d",
		Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	for {
		rec.mu.Lock()
		check := rec.spans["sluice.check"]
		rec.mu.Unlock()
		if check == traceID {
			break
		}
		if time.Since(sent) > 30*time.Second {
			t.Fatalf("no check span in the caller's trace 30s after the check: %v", rec.spans)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
