package grpclimit_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/grpclimit"
)

// A composite key's part that holds a NUL, the separator, is refused: it
// could spell another combination's counter.
func TestComposeRefusesNUL(t *testing.T) {
	key := grpclimit.Compose(grpclimit.Metadata("x-user"), grpclimit.Metadata("x-tenant"))
	for _, tt := range []struct {
		user, tenant string
		err          error
	}{
		{"alice", "acme", nil},
		{"alice\x00acme", "x", grpclimit.ErrAmbiguousKey},
		{"alice", "ac\x00me", grpclimit.ErrAmbiguousKey},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", tt.user, "x-tenant", tt.tenant))
		if _, err := key(ctx, "/s/m"); !errors.Is(err, tt.err) {
			t.Errorf("(%q, %q): %v; want %v", tt.user, tt.tenant, err, tt.err)
		}
	}
}
