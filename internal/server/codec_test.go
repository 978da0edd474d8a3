package server

import (
	"bytes"
	"strings"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"
)

// responseGen draws RLS responses with what ShouldRateLimit fills in, up
// to 80 statuses: past grpc-go's 1 KiB pooling threshold too.
func responseGen() *rapid.Generator[*rlspb.RateLimitResponse] {
	return rapid.Custom(func(t *rapid.T) *rlspb.RateLimitResponse {
		r := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_Code(rapid.IntRange(0, 2).Draw(t, "overall"))}
		for range rapid.IntRange(0, 80).Draw(t, "statuses") {
			st := &rlspb.RateLimitResponse_DescriptorStatus{
				Code:           rlspb.RateLimitResponse_Code(rapid.IntRange(0, 2).Draw(t, "code")),
				LimitRemaining: rapid.Uint32().Draw(t, "remaining"),
			}
			if rapid.Bool().Draw(t, "limited") {
				st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{
					Name:            rapid.String().Draw(t, "name"),
					RequestsPerUnit: rapid.Uint32().Draw(t, "rate"),
					Unit:            rlspb.RateLimitResponse_RateLimit_Unit(rapid.IntRange(0, 7).Draw(t, "unit")),
				}
				if rapid.Bool().Draw(t, "multiplied") {
					st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(rapid.Uint32Min(2).Draw(t, "units"))
				}
				st.DurationUntilReset = &durationpb.Duration{Seconds: rapid.Int64Range(0, 1<<40).Draw(t, "s"), Nanos: rapid.Int32Range(0, 999_999_999).Draw(t, "ns")}
			}
			r.Statuses = append(r.Statuses, st)
		}
		for range rapid.IntRange(0, 3).Draw(t, "headers") {
			r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, &corepb.HeaderValue{Key: rapid.String().Draw(t, "key"), Value: rapid.String().Draw(t, "value")})
		}
		return r
	})
}

// The listener's codec encodes a response to the bytes the proto codec
// writes, pooled buffer or not. Built without -tags vtprotobuf the codec
// is the proto codec, and there is nothing to compare.
func TestRLSResponseEncodedAsByProto(t *testing.T) {
	if marshalResponse == nil {
		t.Skip("built without -tags vtprotobuf: responses are encoded by the proto codec")
	}
	c := newRLSCodec()
	rapid.Check(t, func(t *rapid.T) {
		r := responseGen().Draw(t, "response")
		want, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		defer data.Free()
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("encoded %x, the proto codec %x", got, want)
		}
	})
}

// BenchmarkRLSResponseMarshal prices encoding a one-descriptor response by
// the listener's codec against the proto codec:
//
//	go test -tags vtprotobuf -run '^$' -bench RLSResponseMarshal -count 5 ./internal/server
func BenchmarkRLSResponseMarshal(b *testing.B) {
	r := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: rlspb.RateLimitResponse_RateLimit_SECOND, Name: "remote_address"},
		LimitRemaining:     997,
		DurationUntilReset: &durationpb.Duration{Nanos: 3_000_000},
	}}}
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", encoding.GetCodecV2("proto")}, {"listener", newRLSCodec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.codec.Marshal(r)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// requestGen draws RLS requests with every field the listener's decoder
// reads, each present or not, strings in any UTF-8.
func requestGen() *rapid.Generator[*rlspb.RateLimitRequest] {
	return rapid.Custom(func(t *rapid.T) *rlspb.RateLimitRequest {
		r := &rlspb.RateLimitRequest{Domain: rapid.String().Draw(t, "domain"), HitsAddend: rapid.Uint32().Draw(t, "hits")}
		for range rapid.IntRange(0, 8).Draw(t, "descriptors") {
			d := &commonpb.RateLimitDescriptor{IsNegativeHits: rapid.Bool().Draw(t, "negative")}
			for range rapid.IntRange(0, 4).Draw(t, "entries") {
				d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: rapid.String().Draw(t, "key"), Value: rapid.String().Draw(t, "value")})
			}
			if rapid.Bool().Draw(t, "hits?") {
				d.HitsAddend = wrapperspb.UInt64(rapid.Uint64().Draw(t, "descriptor hits"))
			}
			if rapid.Bool().Draw(t, "override?") {
				d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rapid.Uint32().Draw(t, "rate"),
					Unit: typev3.RateLimitUnit(rapid.Int32Range(-2, 9).Draw(t, "unit"))}
				if rapid.Bool().Draw(t, "units?") {
					d.Limit.UnitMultiplier = wrapperspb.UInt32(rapid.Uint32().Draw(t, "units"))
				}
			}
			r.Descriptors = append(r.Descriptors, d)
		}
		return r
	})
}

// The listener's codec decodes a request to the message proto.Unmarshal
// makes of it, or fails where it fails: requests as Envoy encodes them
// (decoded without reflection: decodeRequest takes them), two encodings
// concatenated (which proto merges), and either with a byte changed or
// cut short (unknown fields, wrong wire types, bad lengths), but for a
// string that is not UTF-8, which it keeps for the door to refuse.
func TestRLSRequestDecodedAsByProto(t *testing.T) {
	c := newRLSCodec()
	rapid.Check(t, func(t *rapid.T) {
		wire, err := proto.Marshal(requestGen().Draw(t, "request"))
		if err != nil {
			t.Fatal(err)
		}
		if len(wire) > 0 && !decodeRequest(wire, &rlspb.RateLimitRequest{}, measureRequest(wire, maxDescriptors+1)) {
			t.Fatalf("a request as proto.Marshal writes it was left to proto.Unmarshal: %x", wire)
		}
		if rapid.Bool().Draw(t, "concatenated") {
			more, _ := proto.Marshal(requestGen().Draw(t, "more"))
			wire = append(wire, more...)
		}
		switch rapid.IntRange(0, 2).Draw(t, "damage") {
		case 1:
			if len(wire) > 0 {
				wire[rapid.IntRange(0, len(wire)-1).Draw(t, "at")] = rapid.Byte().Draw(t, "byte")
			}
		case 2:
			wire = wire[:rapid.IntRange(0, len(wire)).Draw(t, "cut")]
		}
		var want, got rlspb.RateLimitRequest
		wantErr := proto.Unmarshal(wire, &want)
		err = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got)
		switch {
		case err == nil && wantErr != nil && strings.Contains(wantErr.Error(), "UTF-8"):
			// Decoded for the door to refuse (TestDecodeLenientKeepsBytes).
		case (err != nil) != (wantErr != nil) && !(len(want.Descriptors) > maxDescriptors):
			t.Fatalf("%x: listener %v, proto.Unmarshal %v", wire, err, wantErr)
		case err == nil && !proto.Equal(&got, &want):
			t.Fatalf("%x: listener %v, proto.Unmarshal %v", wire, &got, &want)
		}
	})
}

// BenchmarkRLSRequestUnmarshal prices decoding a one-descriptor request
// (one entry, as Envoy's remote_address action sends) by the listener's
// codec against the proto codec:
//
//	go test -run '^$' -bench RLSRequestUnmarshal -count 5 ./internal/server
func BenchmarkRLSRequestUnmarshal(b *testing.B) {
	wire, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.12.34"}}}}})
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", encoding.GetCodecV2("proto")}, {"listener", newRLSCodec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var req rlspb.RateLimitRequest
				if err := c.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A request is decoded in five allocations however many descriptors and
// entries it has (proto.Unmarshal makes 21 of two descriptors of two).
func TestRLSRequestDecodedInFiveAllocations(t *testing.T) {
	entries := []*commonpb.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k1"}, {Key: "path", Value: "/v1/x"}}
	wire, _ := proto.Marshal(&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: entries}, {Entries: entries}}})
	shape := measureRequest(wire, maxDescriptors+1)
	var req rlspb.RateLimitRequest
	if got := testing.AllocsPerRun(100, func() {
		req = rlspb.RateLimitRequest{}
		if !decodeRequest(wire, &req, shape) {
			t.Fatal("left to proto.Unmarshal")
		}
	}); got != 5 {
		t.Errorf("%v allocations, want 5", got)
	}
	t.Logf("proto.Unmarshal: %v allocations", testing.AllocsPerRun(100, func() { req = rlspb.RateLimitRequest{}; proto.Unmarshal(wire, &req) }))
}
