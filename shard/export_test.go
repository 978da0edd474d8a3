package shard

import (
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
)

// RegisterUnaryOnly serves the peer service as peers from before the
// stream did: the unary method alone.
func RegisterUnaryOnly(s *grpc.Server, local sluice.Store) {
	s.RegisterService(unaryService(local), nil)
}
