package shard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/shard"
)

// Per-shard ownership: each key is decided in the memory of the member
// that owns it; this one forwards the others' over gRPC (register
// shard.Register on its gRPC server so they can forward to it). (Not run:
// it needs its peers.)
func Example() {
	local := memstore.New(memstore.Options{})
	self := "10.0.0.1:8081"
	s, err := shard.New(shard.Options{
		Self:    self,
		Members: shard.Static(self, []string{"10.0.0.1:8081", "10.0.0.2:8081", "10.0.0.3:8081"}, time.Second),
		Local:   local,
	})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	d, err := s.Take(context.Background(), sluice.Request{Key: "user:42", Limit: sluice.Limit{Rate: 100, Period: time.Minute}, Cost: 1})
	fmt.Println(d.Allowed, err, "owned by", s.Owner("user:42"))
}
