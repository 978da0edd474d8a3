//go:build !vtprotobuf

package server

import (
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
)

// marshalResponse is nil without -tags vtprotobuf: the proto codec
// encodes a response, by reflection.
var marshalResponse func(*rlspb.RateLimitResponse) (mem.BufferSlice, error)
