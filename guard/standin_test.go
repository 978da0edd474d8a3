package guard

import (
	"fmt"
	"github.com/sluicehq/sluice"
	"sync"
	"testing"
)

// A key new to a full bucket of the stand-in's record takes the slot of
// the record back to full soonest: one already back to full first, which
// tells nothing, then the one that will be soonest; the others stay.
func TestSeenBucketGivesUpTheRecordBackToFullSoonest(t *testing.T) {
	tb := newSeenTable(minSeen)
	const now = 1000
	// Hashes of one bucket: the same low bits.
	h := func(i uint64) uint64 { return i<<32 | 7 }
	// A full bucket: record 2 is back to full, 3 will be soonest.
	resets := []int64{now + 100, now - 1, now + 50, now + 200, now + 60, now + 70, now + 80, now + 90}
	for i, reset := range resets {
		slot, took := tb.claim(h(uint64(i+1)), now)
		if !took {
			t.Fatalf("record %d: an empty slot not taken", i+1)
		}
		slot.resetAt.Store(reset)
	}
	for _, c := range []struct {
		key, gone uint64 // the record written and the one it replaces
		reset     int64
	}{{9, 2, now + 300}, {10, 3, now + 400}} {
		slot, took := tb.claim(h(c.key), now)
		if took {
			t.Fatalf("record %d took an empty slot of a full bucket", c.key)
		}
		slot.resetAt.Store(c.reset)
		if tb.slot(h(c.gone)) != nil {
			t.Fatalf("record %d: %d is still recorded; want it replaced", c.key, c.gone)
		}
	}
	for _, k := range []uint64{1, 4, 5, 6, 7, 8, 9, 10} {
		if tb.slot(h(k)) == nil {
			t.Errorf("record %d lost", k)
		}
	}
}

// Goroutines recording the same keys at once, while the record grows under
// them, leave it sound: sized by the keys, each key in one slot (but for
// the rare race claim describes), and every key found once written again.
// (How many a burst of new keys loses during a grow depends on the
// scheduler, so it is not counted.)
func TestSeenRecordsOnceUnderConcurrency(t *testing.T) {
	s := newStandin(nil, 1)
	const keys, writers = 2000, 8
	limit := sluice.PerSecond(10)
	record := func(i int, remaining int64) {
		r := sluice.Request{Key: fmt.Sprint("k", i), Limit: limit, Cost: 1}
		s.record1(&r, &sluice.Decision{Remaining: remaining, ResetAfter: 3600e9})
	}
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for i := range keys {
				record(i, 3)
			}
		})
	}
	wg.Wait()
	tb := s.seen.Load()
	count := map[uint64]int{}
	for i := range tb.slots {
		if h := tb.slots[i].sum.Load(); h != 0 {
			count[h]++
		}
	}
	twice := 0
	for _, n := range count {
		if n > 1 {
			twice++
		}
	}
	if twice > keys/100 {
		t.Fatalf("%d of %d keys in more than one slot; want at most 1%%", twice, keys)
	}
	// A table is grown from an estimate of its records when half full: to
	// 4 slots a key at most, or 8 when keys kept arriving into a full
	// table while its grower was descheduled.
	if len(tb.slots) > 8*keys {
		t.Fatalf("%d slots for %d keys; want at most %d", len(tb.slots), keys, 8*keys)
	}

	for i := range keys {
		record(i, 5)
	}
	found := 0
	for i := range keys {
		if r := (sluice.Request{Key: fmt.Sprint("k", i), Limit: limit}); s.remaining(&r) == 5 {
			found++
		}
	}
	// A bucket of 8 holds 2 to 4 keys on average: under 1% are lost to
	// buckets holding more.
	if found < keys*98/100 {
		t.Fatalf("%d of %d keys found with their record; want at least 98%%", found, keys)
	}
}
