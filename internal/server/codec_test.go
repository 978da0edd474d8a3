package server

import (
	"bytes"
	"testing"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
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
