package shard

import (
	"reflect"
	"testing"
	"time"
)

func TestCodecRoundTrip(t *testing.T) {
	calls := []wireCall{
		{Reqs: []wireRequest{{Key: "a\x00b", Algorithm: 6, Rate: 10, Period: time.Second, Burst: 3, Cost: 1, NowUnixUS: 1_700_000_000_000_000}}},
		{Reset: true, Reqs: []wireRequest{{Key: "", Algorithm: 1, Rate: 1 << 40, Period: 1000, Cost: 0, Force: true}}},
	}
	got, err := decodeCalls(appendCalls(nil, calls))
	if err != nil || !reflect.DeepEqual(got, calls) {
		t.Fatalf("calls: %+v, %v", got, err)
	}
	results := []wireResult{{Decisions: []wireDecision{{Allowed: true, Remaining: 9, RetryAfter: 0, ResetAfter: time.Second, Delay: 5}}}, {Err: "boom", Decisions: []wireDecision{}}}
	back, err := decodeResults(appendResults(nil, results))
	if err != nil || !reflect.DeepEqual(back, results) {
		t.Fatalf("results: %+v, %v", back, err)
	}
}

// A peer that answers garbage is an error, never a panic or a huge
// allocation.
func FuzzDecode(f *testing.F) {
	f.Add(appendCalls(nil, []wireCall{{Reqs: []wireRequest{{Key: "k", Rate: 1, Period: 1}}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeCalls(b)
		decodeResults(b)
	})
}
