package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/config"
)

// entryText draws keys and values from the characters that separate a
// counter's name, so that collisions are likely if the encoding allows
// them.
var entryText = rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'b', '=', 0, '\t', 1, 0x7f, 'é'}), 0, 4, -1)

func entriesGen() *rapid.Generator[[]config.Entry] {
	return rapid.Custom(func(t *rapid.T) []config.Entry {
		n := rapid.IntRange(1, 3).Draw(t, "n")
		es := make([]config.Entry, n)
		for i := range es {
			es[i] = config.Entry{Key: entryText.Draw(t, "key"), Value: entryText.Draw(t, "value")}
		}
		return es
	})
}

// No two descriptors that the service accepts name one counter: the
// counter's name of any tuple of entries that checkEntries lets through
// reads back as that tuple (split at NUL, then at the first '='), so the
// naming is one-to-one on what is accepted.
func TestDescriptorKeysCannotCollide(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := entriesGen().Draw(t, "a")
		if checkEntries(0, a) != nil {
			return
		}
		var back []config.Entry
		for _, part := range strings.Split(descriptorKey("d", a, nil), "\x00")[1:] {
			k, v, _ := strings.Cut(part, "=")
			back = append(back, config.Entry{Key: k, Value: v})
		}
		if !slices.Equal(back, a) {
			t.Fatalf("%q names the counter %q, which reads back as %q", a, descriptorKey("d", a, nil), back)
		}
	})
}

// A descriptor value with a NUL cannot name a two-entry descriptor's
// counter: it is refused with InvalidArgument, and the victim's counter
// is untouched, on the memory store.
func TestDescriptorWithNULRefused(t *testing.T) {
	r := start(t, `
domains:
  - domain: d
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
        descriptors:
          - key: route
            rate_limit: {unit: hour, requests_per_unit: 2}
`, "")
	conn, err := grpc.NewClient(r.Addrs().GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	desc := func(kv ...string) *rlspb.RateLimitRequest {
		d := &commonpb.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{d}}
	}
	for range 3 {
		_, err := c.ShouldRateLimit(context.Background(), desc("user", "alice\x00route=/x"))
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a value with a NUL: %v; want InvalidArgument", err)
		}
	}
	resp, err := c.ShouldRateLimit(context.Background(), desc("user", "alice", "route", "/x"))
	if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("the victim: %v, %v; want OK with 1 remaining", resp, err)
	}
	for _, key := range []string{"a=b", "a\x00"} {
		if _, err := c.ShouldRateLimit(context.Background(), desc(key, "v")); status.Code(err) != codes.InvalidArgument {
			t.Errorf("entry key %q: %v; want InvalidArgument", key, err)
		}
	}
}

// An RLS request with more descriptors than the bound is refused from its
// wire form; one at the bound is decoded.
func TestRLSCodecBoundsDescriptors(t *testing.T) {
	c := newRLSCodec()
	for _, n := range []int{1, maxDescriptors, maxDescriptors + 1, 100_000} {
		req := &rlspb.RateLimitRequest{Domain: "d"}
		for range n {
			req.Descriptors = append(req.Descriptors, &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}})
		}
		b, _ := proto.Marshal(req)
		var got rlspb.RateLimitRequest
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
		switch {
		case n > maxDescriptors && (status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors")):
			t.Errorf("%d descriptors: %v; want InvalidArgument", n, err)
		case n <= maxDescriptors && (err != nil || len(got.Descriptors) != n):
			t.Errorf("%d descriptors: %v, %d decoded", n, err, len(got.Descriptors))
		}
	}
}

// BenchmarkRLSCodecRefuses is the cost of refusing a request of 100,000
// descriptors, beside decoding it as grpc-go's own codec would.
func BenchmarkRLSCodecRefuses(b *testing.B) {
	req := &rlspb.RateLimitRequest{Domain: "d"}
	for range 100_000 {
		req.Descriptors = append(req.Descriptors, &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}})
	}
	wire, _ := proto.Marshal(req)
	b.Run("sluice", func(b *testing.B) {
		c := newRLSCodec()
		b.ReportAllocs()
		for b.Loop() {
			var got rlspb.RateLimitRequest
			c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got rlspb.RateLimitRequest
			proto.Unmarshal(wire, &got)
		}
	})
}
