package bench

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// spinChild is the environment variable that makes the test binary burn
// one CPU until killed (see BenchmarkBusyHost).
const spinChild = "SLUICE_BENCH_SPIN"

func spin() {
	runtime.GOMAXPROCS(1)
	for x := uint64(1); ; x = x*6364136223846793005 + 1 {
	}
}

// hogs are CPU-bound processes, stopped (SIGSTOP) until busy is called.
type hogs []*exec.Cmd

func startHogs(b *testing.B, n int) hogs {
	var h hogs
	for range n {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), spinChild+"=1")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmd.Process.Signal(syscall.SIGSTOP)
		h = append(h, cmd)
	}
	b.Cleanup(func() {
		for _, c := range h {
			c.Process.Kill()
			c.Wait()
		}
	})
	return h
}

// busy runs (on) or stops the hogs.
func (h hogs) busy(on bool) {
	sig := syscall.SIGSTOP
	if on {
		sig = syscall.SIGCONT
	}
	for _, c := range h {
		c.Process.Signal(sig)
	}
}

// BenchmarkBusyHost prices a decision on the memory store's two state
// layouts against x/time/rate and go-limiter, from GOMAXPROCS goroutines
// on one hot key and on 10k keys, quiet and beside two CPU-bound
// processes. 10^9 a second has an emission interval of 1/1000 µs: its
// remainder counts in units of 10^6 and packs beside the TAT, one word
// swapped without a lock. 999,999,937 an hour has a remainder of 30 bits
// that shares no factor with the hour: two words, decided under the lock
// that is the first. Each round runs every library quiet and then busy;
// it reports each one's wall ns per decision, quiet and busy (medians of
// the rounds), busy ÷ quiet, and busy ÷ quiet of the CPU this process
// spent per decision.
//
//	cd bench && go test -run '^$' -bench BusyHost -cpu 2 -benchtime 5x -count 3 .
func BenchmarkBusyHost(b *testing.B) {
	const perRound = 2_000_000
	h := startHogs(b, 2)
	for _, lm := range []struct {
		name  string
		limit sluice.Limit
	}{
		{"1e9per1s-one-word", sluice.Limit{Rate: 1_000_000_000, Period: time.Second}},
		{"999999937per1h-two-words", sluice.Limit{Rate: 999_999_937, Period: time.Hour}},
	} {
		for _, ks := range keySets()[:2] {
			busyHost(b, h, lm.name+"/"+ks.name, lm.limit, ks.keys, perRound)
		}
	}
}

// busyHost is one case of BenchmarkBusyHost: limit over keys.
func busyHost(b *testing.B, h hogs, name string, limit sluice.Limit, keys []string, perRound int) {
	type lib struct {
		name string
		take func(key string) bool
	}
	var libs []lib
	for _, l := range limiters {
		take := l.new(b, limit)
		libs = append(libs, lib{l.name, func(key string) bool { ok, _ := take(key); return ok }})
	}
	b.Run(name, func(b *testing.B) {
		quiet, busy := make([][]float64, len(libs)), make([][]float64, len(libs))
		quietCPU, busyCPU := make([][]float64, len(libs)), make([][]float64, len(libs))
		for _, lib := range libs {
			for _, k := range keys {
				lib.take(k)
			}
		}
		b.ResetTimer()
		for range b.N {
			for i, lib := range libs {
				w, c := perDecision(keys, perRound, lib.take)
				quiet[i], quietCPU[i] = append(quiet[i], w), append(quietCPU[i], c)
				h.busy(true)
				w, c = perDecision(keys, perRound, lib.take)
				busy[i], busyCPU[i] = append(busy[i], w), append(busyCPU[i], c)
				h.busy(false)
			}
		}
		b.StopTimer()
		for i, lib := range libs {
			q, bz := median(quiet[i]), median(busy[i])
			b.ReportMetric(q, lib.name+"-quiet-ns")
			b.ReportMetric(bz, lib.name+"-busy-ns")
			b.ReportMetric(bz/q, lib.name+"-busy÷quiet")
			b.ReportMetric(median(busyCPU[i])/median(quietCPU[i]), lib.name+"-cpu-busy÷quiet")
		}
		b.ReportMetric(0, "ns/op")
	})
}

// perDecision runs n decisions of take over keys from GOMAXPROCS
// goroutines and returns the wall time and the CPU time (this process's,
// user and system) per decision in ns.
func perDecision(keys []string, n int, take func(string) bool) (wall, cpu float64) {
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	for g := range procs {
		wg.Go(func() {
			for i := g * 7919; i < g*7919+n/procs; i++ {
				take(keys[i%len(keys)])
			}
		})
	}
	wg.Wait()
	wall = float64(time.Since(start).Nanoseconds()) / float64(n)
	return wall, float64((cpuTime() - cpu0).Nanoseconds()) / float64(n)
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
