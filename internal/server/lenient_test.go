package server

import (
	"bytes"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/api/sluicev1"
)

// A check request whose identity is not UTF-8 is decoded by the
// listener's codec with that identity's bytes as sent, and every other
// field as proto.Unmarshal decodes it: the native service's and Envoy's.
func TestDecodeLenientKeepsBytes(t *testing.T) {
	const placeholder, id = "\x1f\x1f\x1f\x1f", "a\xff\xfeb"
	cost := int64(3)
	for _, tt := range []struct {
		msg  proto.Message
		set  func(proto.Message, string)
		read func(proto.Message) string
	}{
		{&sluicev1.CheckRequest{Checks: []*sluicev1.Check{{Policy: "p", Cost: &cost, Plan: "pro", Reserve: true}, {Policy: "q", Key: "k"}}},
			func(m proto.Message, s string) { m.(*sluicev1.CheckRequest).Checks[0].Key = s },
			func(m proto.Message) string { return m.(*sluicev1.CheckRequest).Checks[0].Key }},
		{&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 2, Descriptors: []*commonpb.RateLimitDescriptor{{
			Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "api_key"}, {Key: "path", Value: "/x"}}, HitsAddend: wrapperspb.UInt64(4)}}},
			func(m proto.Message, s string) { m.(*rlspb.RateLimitRequest).Descriptors[0].Entries[0].Value = s },
			func(m proto.Message) string { return m.(*rlspb.RateLimitRequest).Descriptors[0].Entries[0].Value }},
	} {
		tt.set(tt.msg, placeholder)
		wire, err := proto.Marshal(tt.msg)
		if err != nil {
			t.Fatal(err)
		}
		wire = bytes.Replace(wire, []byte(placeholder), []byte(id), 1)
		got := tt.msg.ProtoReflect().New().Interface()
		if err := newRLSCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, got); err != nil {
			t.Fatalf("%T: %v", got, err)
		}
		if k := tt.read(got); k != id {
			t.Errorf("%T: identity %q; want %q", got, k, id)
		}
		tt.set(got, placeholder)
		if !proto.Equal(got, tt.msg) {
			t.Errorf("decoded %v; want %v", got, tt.msg)
		}
	}
}

// An Envoy request whose domain is not UTF-8, which the codec decodes,
// is refused with InvalidArgument.
func TestRLSDomainNotUTF8Refused(t *testing.T) {
	r := start(t, "domains: [{domain: d, descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]}]\n", "")
	req := &rlspb.RateLimitRequest{Domain: "d\xff", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := (&rls{s: r.Server}).ShouldRateLimit(t.Context(), req); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("domain %q: %v; want InvalidArgument", req.Domain, err)
	}
}
