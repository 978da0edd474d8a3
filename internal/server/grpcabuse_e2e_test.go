//go:build e2e

package server

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The stalled-calls floor at its full size: 100 connections of 1,000
// stalled calls each. Behind the e2e build tag; .ci/run runs it without
// the race detector.

// Calls that send their headers and 5 bytes of a message, then nothing,
// are ended by the receive deadline: 100 connections × 1,000 such calls
// are all closed, and the server's goroutines and memory come back.
func TestStalledCallsAreCut(t *testing.T) {
	r := start(t, "listeners: {drain: 0s, read_timeout: 2s}\npolicies: [{name: p, limit: 1000000/1h}]", "")
	addr := r.Addrs().GRPC
	baseG, baseRSS := settledGoroutines(), rss(t)
	conns, calls := 100, uint32(1000)
	if raceEnabled {
		// The race detector allows 8,128 goroutines at once; the server
		// holds one per call in flight (100 a connection).
		conns = 40
	}
	var wg sync.WaitGroup
	var closedCalls atomic.Int64
	began := time.Now()
	for range conns {
		h := dialH2(t, addr)
		wg.Go(func() {
			defer h.c.Close()
			for i := range calls {
				id := 2*i + 1
				h.open(id, false)
				h.fr.WriteData(id, false, []byte{0, 0, 0, 0, 100}) // a 100-byte message, never sent
			}
			h.w.Flush()
			h.c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			open := map[uint32]bool{}
			for i := range calls {
				open[2*i+1] = true
			}
			if err := h.awaitEnd(open); err != nil {
				t.Error(err)
				return
			}
			closedCalls.Add(int64(calls))
		})
	}
	wg.Wait()
	if n, want := closedCalls.Load(), int64(conns)*int64(calls); n != want {
		t.Fatalf("%d of %d stalled calls closed", n, want)
	}
	t.Logf("%d stalled calls closed %v after they began (receive deadline 2 s)", int64(conns)*int64(calls), time.Since(began).Round(100*time.Millisecond))
	waitFor(t, "goroutines back to their start ±50", func() bool { return abs(settledGoroutines()-baseG) <= 50 })
	if got := metricValue(t, r, `sluice_grpc_refused_total{reason="receive_timeout"}`); got < 1 {
		t.Fatalf("receive timeouts counted: %v", got)
	}
	checkRLS(t, addr) // the listener still answers
	if raceEnabled {
		// The race detector's shadow memory is never given back: the
		// RSS floor is for the real build (.ci/run runs it without -race).
		return
	}
	waitFor(t, "RSS back within 50 MB of its start", func() bool {
		runtime.GC()
		debug.FreeOSMemory()
		now := rss(t)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("RSS %d MB, at the start %d MB; goroutines %d; heap in use %d MB, stacks %d MB, released %d MB, sys %d MB", now>>20, baseRSS>>20, runtime.NumGoroutine(), ms.HeapInuse>>20, ms.StackInuse>>20, ms.HeapReleased>>20, ms.Sys>>20)
		return now-baseRSS < 50<<20
	})
}

// settledGoroutines is the goroutine count once it stops falling.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond) // sampling a count, not timing an event
		m := runtime.NumGoroutine()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

// rss is this process's resident set, from /proc.
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status here")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS here")
	return 0
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
