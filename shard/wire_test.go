package shard

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice"
	shardv1 "github.com/sluicehq/sluice/api/shardv1"
	"github.com/sluicehq/sluice/memstore"
)

// A call's requests travel column by column and come back the same, zones
// and flags included.
func TestBatchRoundTrip(t *testing.T) {
	ny, _ := sluice.LoadZone("America/New_York")
	calls := [][]sluice.Request{
		{{Key: "a\x00b", Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Second, Burst: 3}, Cost: 1, Now: time.UnixMicro(1_700_000_000_000_000)}},
		{{Key: "c", Limit: sluice.Limit{Algorithm: sluice.Calendar, Rate: 5, Period: sluice.CalendarDay, Zone: ny, CountAll: true}, Cost: 2, Force: true},
			{Key: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1 << 40, Period: time.Millisecond}}},
	}
	b := new(shardv1.Batch)
	resetBatch(b)
	for _, c := range calls {
		appendCall(b, c, false, 0)
	}
	wire, err := proto.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	back := new(shardv1.Batch)
	if err := proto.Unmarshal(wire, back); err != nil {
		t.Fatal(err)
	}
	if err := checkBatch(back); err != nil {
		t.Fatal(err)
	}
	j, off := 0, 0
	for _, c := range calls {
		for _, want := range c {
			got, err := request(back, j, off)
			if err != nil || got != want {
				t.Fatalf("request %d: %+v, %v; want %+v", j, got, err, want)
			}
			off += int(back.KeyLengths[j])
			j++
		}
	}
}

// A batch from a peer is checked whole before it is read: whatever the
// bytes, an error or a decision, never a panic.
func FuzzBatch(f *testing.F) {
	b := new(shardv1.Batch)
	resetBatch(b)
	appendCall(b, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), Cost: 1}}, false, 0)
	seed, _ := proto.Marshal(b)
	f.Add(seed)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	store := memstore.New(memstore.Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := new(shardv1.Batch)
		if proto.Unmarshal(data, in) != nil || checkBatch(in) != nil {
			return
		}
		j, off := 0, 0
		for i, size := range in.CallSizes {
			var reqs []sluice.Request
			for range size {
				if r, err := request(in, j, off); err == nil {
					reqs = append(reqs, r)
				}
				off += int(in.KeyLengths[j])
				j++
			}
			if len(reqs) == int(size) {
				reset := len(in.CallResets) > 0 && in.CallResets[i]
				serveCall(context.Background(), store, reqs, reset, nil)
			}
		}
	})
}
