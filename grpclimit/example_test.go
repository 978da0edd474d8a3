package grpclimit_test

import (
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/memstore"
)

// Limit a gRPC service per client: 100 calls a minute per API key on one
// method, 1,000 per peer address on the whole service.
func Example() {
	i, err := grpclimit.New(grpclimit.Options{
		Store: memstore.New(memstore.Options{}),
		Policies: []grpclimit.Policy{
			{Name: "search", Method: "/shop.Catalog/Search", Limit: sluice.Limit{Rate: 100, Period: time.Minute}, Key: grpclimit.Metadata("x-api-key")},
			{Name: "catalog", Method: "/shop.Catalog/", Limit: sluice.Limit{Rate: 1000, Period: time.Minute}, Key: grpclimit.PeerAddr()},
		},
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(i.Unary()), grpc.StreamInterceptor(i.Stream()))
	defer srv.Stop()
	fmt.Println("limited")
	// Output: limited
}
