package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rlsCodec is the gRPC listener's protobuf codec. An Envoy RLS request
// with more than maxDescriptors descriptors is refused from its wire
// form, which is read field by field without decoding the descriptors,
// before any of them is decoded: refused or not, a request of 100,000
// descriptors would otherwise cost their decoding and their memory. A
// response is encoded by marshalResponse when the build has one (-tags
// vtprotobuf, as the release build).
type rlsCodec struct{ encoding.CodecV2 }

// descriptorsField is RateLimitRequest.descriptors' field number.
const descriptorsField = 2

func newRLSCodec() rlsCodec { return rlsCodec{encoding.GetCodecV2("proto")} }

func (c rlsCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlspb.RateLimitResponse); ok && marshalResponse != nil {
		return marshalResponse(r)
	}
	return c.CodecV2.Marshal(v)
}

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlspb.RateLimitRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if n := countField(b, descriptorsField, maxDescriptors+1); n > maxDescriptors {
		return status.Errorf(codes.InvalidArgument, "more than %d descriptors: want 1 to %d", maxDescriptors, maxDescriptors)
	}
	return proto.Unmarshal(b, req)
}

// countField counts the top-level occurrences of field num in the wire
// form b, stopping at most; malformed input is left to the decoder.
func countField(b []byte, num protowire.Number, most int) int {
	n := 0
	for len(b) > 0 && n < most {
		f, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return n
		}
		b = b[k:]
		k = protowire.ConsumeFieldValue(f, typ, b)
		if k < 0 {
			return n
		}
		b = b[k:]
		if f == num {
			n++
		}
	}
	return n
}
