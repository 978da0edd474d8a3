package sample

import "testing"

func TestAllowBoundsLinesPerLabelAndCountsTheRest(t *testing.T) {
	s := New(2)
	var let int
	for range 10 {
		if ok, _ := s.Allow("a"); ok {
			let++
		}
	}
	// The test may straddle a second boundary: then up to 2 more pass.
	if let < 2 || let > 4 {
		t.Fatalf("let %d of 10 lines through at 2/s", let)
	}
	if ok, _ := s.Allow("b"); !ok {
		t.Fatal("a second label shares the first one's budget")
	}
	s.labels.Range(func(_, v any) bool {
		w := v.(*window)
		w.second = -1 // the next second
		return true
	})
	ok, held := s.Allow("a")
	if !ok || held != int64(10-let) {
		t.Fatalf("next second: ok %v, held back %d, want true, %d", ok, held, 10-let)
	}
}
