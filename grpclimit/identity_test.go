package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
)

// A composite key's part that holds a NUL, the separator, is refused: it
// could spell another combination's counter. Metadata refuses it itself,
// as the identity rule of every door does; Compose refuses it from a key
// function of the application's.
func TestComposeRefusesNUL(t *testing.T) {
	key := grpclimit.Compose(grpclimit.Metadata("x-user"), grpclimit.Metadata("x-tenant"))
	raw := func(ctx context.Context, _ string) (string, error) {
		return metadata.ValueFromIncomingContext(ctx, "x-user")[0], nil
	}
	own := grpclimit.Compose(raw, grpclimit.Metadata("x-tenant"))
	for _, tt := range []struct {
		key          grpclimit.KeyFunc
		user, tenant string
		err          error
	}{
		{key, "alice", "acme", nil},
		{key, "alice\x00acme", "x", grpclimit.ErrInvalidKey},
		{key, "alice", "ac\x00me", grpclimit.ErrInvalidKey},
		{own, "alice", "acme", nil},
		{own, "alice\x00acme", "x", grpclimit.ErrAmbiguousKey},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", tt.user, "x-tenant", tt.tenant))
		if _, err := tt.key(ctx, "/s/m"); !errors.Is(err, tt.err) {
			t.Errorf("(%q, %q): %v; want %v", tt.user, tt.tenant, err, tt.err)
		}
	}
}

// A call without the metadata its policy keys on is decided by Missing:
// by default limited per peer address (3 of 10 pass on 3/1h), deny fails
// it InvalidArgument and charges nobody, skip lets it through.
func TestMissingKey(t *testing.T) {
	redistest.HourAhead()
	hour := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: n, Period: time.Hour}
	}
	for _, tt := range []struct {
		missing sluice.MissingKey
		want    map[codes.Code]int
	}{
		{sluice.MissingClientIP, map[codes.Code]int{codes.OK: 3, codes.ResourceExhausted: 7}},
		{sluice.MissingDeny, map[codes.Code]int{codes.InvalidArgument: 10}},
		{sluice.MissingSkip, map[codes.Code]int{codes.OK: 10}},
	} {
		t.Run(tt.missing.String(), func(t *testing.T) {
			store := memstore.New(memstore.Options{})
			c := serve(t, grpclimit.Options{Store: store, Policies: []grpclimit.Policy{
				{Name: "per-key", Limit: hour(3), Key: grpclimit.Metadata("x-api-key"), Missing: tt.missing},
				{Name: "per-peer", Limit: hour(1000), Key: grpclimit.PeerAddr()},
			}})
			got := map[codes.Code]int{}
			for range 10 {
				_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
				got[status.Code(err)]++
			}
			for code, n := range tt.want {
				if got[code] != n {
					t.Fatalf("10 calls without x-api-key: %v; want %v", got, tt.want)
				}
			}
			d, _ := store.Take(context.Background(), sluice.Request{Key: "per-peer\x00127.0.0.1", Limit: hour(1000)})
			if want := int64(got[codes.OK]); 1000-d.Remaining != want {
				t.Fatalf("the per-peer policy was charged %d; want %d (the calls that passed)", 1000-d.Remaining, want)
			}
		})
	}
}
