package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/api/sluicev1"
)

// rlsCodec is the gRPC listener's protobuf codec. An Envoy RLS request
// with more than maxDescriptors descriptors is refused from its wire
// form, which is read field by field without decoding the descriptors,
// before any of them is decoded: refused or not, a request of 100,000
// descriptors would otherwise cost their decoding and their memory. One
// that is not is decoded by decodeRequest, without reflection, unless it
// holds what only proto.Unmarshal decodes. A check request (Envoy's or
// the native one) holding a string that is not UTF-8 is decoded all the
// same (decodeLenient), for the door to refuse. A response is encoded by
// marshalResponse when the build has one (-tags vtprotobuf, as the
// release build).
type rlsCodec struct{ encoding.CodecV2 }

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
		err := c.CodecV2.Unmarshal(data, v)
		if check, ok := v.(*sluicev1.CheckRequest); ok && err != nil {
			proto.Reset(check)
			b := data.Materialize()
			return decodeLenient(b, check.ProtoReflect())
		}
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	shape := measureRequest(b, maxDescriptors+1)
	if shape.descriptors > maxDescriptors {
		return status.Errorf(codes.InvalidArgument, "more than %d descriptors: want 1 to %d", maxDescriptors, maxDescriptors)
	}
	if decodeRequest(b, req, shape) {
		return nil
	}
	if proto.Unmarshal(b, req) == nil {
		return nil
	}
	proto.Reset(req)
	return decodeLenient(b, req.ProtoReflect())
}
