package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	extrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fuzzServer is a server on the embedded default config and the memory
// store, not listening: the fuzz targets call its handlers.
func fuzzServer(f *testing.F) *Server {
	s, err := New(Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// FuzzCheckRequest feeds POST /v1/check arbitrary bodies: every one is
// answered 200 with one result per check, or refused 400 or 415 with a
// problem body; none panics or answers 5xx.
func FuzzCheckRequest(f *testing.F) {
	s := fuzzServer(f)
	for _, seed := range []string{
		`{"checks":[{"policy":"default","key":"alice"}]}`,
		`{"checks":[{"policy":"api","key":"k","cost":0},{"policy":"login","key":"u\u00e9"}]}`,
		`{"checks":[{"policy":"default","key":"a"}]}{"x":1}`,
		`{"checks":[{"policy":"default","key":"\ud800"}]}`,
		`{"checks":[]}`, `[]`, `null`, `{"checks":[{"policy":"nope","key":"a","cost":-1}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.handleCheck(w, r)
		switch w.Code {
		case 200:
			var resp CheckResponse
			var req CheckRequest
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("200 with a body that does not parse: %v", err)
			}
			if json.Unmarshal(body, &req) == nil && len(resp.Results) != len(req.Checks) {
				t.Fatalf("%d results for %d checks", len(resp.Results), len(req.Checks))
			}
		case 400, 415:
			if w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d without a problem body", w.Code)
			}
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}

// FuzzRLSRequest feeds the Envoy rate limit service arbitrary requests, as
// protobuf over gRPC and as JSON over /json: each is answered, or refused
// with InvalidArgument (400 over /json); none panics. The listener's codec
// decodes each protobuf request to what proto.Unmarshal makes of it.
func FuzzRLSRequest(f *testing.F) {
	s := fuzzServer(f)
	svc, codec := &rls{s: s}, newRLSCodec()
	for _, req := range []*rlspb.RateLimitRequest{
		{Domain: "edge", Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}},
		{Domain: "edge", HitsAddend: 3, Descriptors: []*extrl.RateLimitDescriptor{{Entries: []*extrl.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}, {Key: "path", Value: "/x"}}}}},
		{Domain: "nope"},
	} {
		b, _ := proto.Marshal(req)
		f.Add(b, false)
		j, _ := json.Marshal(map[string]any{"domain": req.Domain})
		f.Add(j, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		if asJSON {
			r := httptest.NewRequest("POST", "/json", bytes.NewReader(data))
			w := httptest.NewRecorder()
			s.handleEnvoyJSON(w, r)
			if w.Code != 200 && w.Code != 429 && w.Code != 400 {
				t.Fatalf("/json status %d for %q", w.Code, data)
			}
			return
		}
		// Decoded by the listener's codec, as by proto.Unmarshal.
		var req, want rlspb.RateLimitRequest
		err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &req)
		wantErr := proto.Unmarshal(data, &want)
		switch {
		case err == nil && wantErr != nil && strings.Contains(wantErr.Error(), "UTF-8"):
			// Decoded for the door to refuse (decodeLenient).
		case (err != nil) != (wantErr != nil) && len(want.Descriptors) <= maxDescriptors:
			t.Fatalf("%x: listener's codec %v, proto.Unmarshal %v", data, err, wantErr)
		case err == nil && wantErr == nil && !proto.Equal(&req, &want):
			t.Fatalf("%x: listener's codec %v, proto.Unmarshal %v", data, &req, &want)
		case err != nil:
			return
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("error %v for %v", err, &req)
		}
		if err == nil && len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}
