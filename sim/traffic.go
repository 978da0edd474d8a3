package sim

import (
	"bufio"
	"fmt"
	"io"
	"iter"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Arrival is one request: its time from the start, its key and its cost.
type Arrival struct {
	T    time.Duration
	Key  string
	Cost int64
}

// Traffic is a stream of arrivals in time order.
type Traffic = iter.Seq[Arrival]

// clientKeys returns n distinct key names, made once so that arrivals
// allocate nothing.
func clientKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}

// Steady sends rate requests per second, evenly spaced, round-robin over
// clients, for d.
func Steady(rate float64, d time.Duration, clients int) Traffic {
	keys := clientKeys(max(clients, 1))
	return func(yield func(Arrival) bool) {
		gap := time.Duration(float64(time.Second) / rate)
		for i, t := 0, time.Duration(0); t < d; i, t = i+1, t+gap {
			if !yield(Arrival{T: t, Key: keys[i%len(keys)], Cost: 1}) {
				return
			}
		}
	}
}

// Poisson sends requests at an average of rate per second with
// exponential gaps, uniformly over clients, for d.
func Poisson(rate float64, d time.Duration, clients int, seed uint64) Traffic {
	keys := clientKeys(max(clients, 1))
	return func(yield func(Arrival) bool) {
		r := rand.New(rand.NewPCG(seed, 1))
		for t := time.Duration(0); ; {
			t += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
			if t >= d || !yield(Arrival{T: t, Key: keys[r.IntN(len(keys))], Cost: 1}) {
				return
			}
		}
	}
}

// OnOff alternates on periods with Poisson arrivals at rate per second and
// silent off periods: bursty traffic.
func OnOff(rate float64, on, off, d time.Duration, clients int, seed uint64) Traffic {
	keys := clientKeys(max(clients, 1))
	return func(yield func(Arrival) bool) {
		r := rand.New(rand.NewPCG(seed, 2))
		for t := time.Duration(0); t < d; {
			t += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
			if phase := t % (on + off); phase >= on {
				t += on + off - phase // skip the silence
			}
			if t >= d || !yield(Arrival{T: t, Key: keys[r.IntN(len(keys))], Cost: 1}) {
				return
			}
		}
	}
}

// BoundaryAttack is the fixed window's worst case: one client sends rate
// requests just before every window edge (within the last `spread` of the
// window) and rate more just after, for windows windows of length period.
func BoundaryAttack(rate int64, period time.Duration, windows int) Traffic {
	return func(yield func(Arrival) bool) {
		spread := period / 100
		for w := 1; w <= windows; w++ {
			edge := time.Duration(w) * period
			for i := range rate {
				t := edge - spread + time.Duration(i)*spread/time.Duration(rate)
				if !yield(Arrival{T: t, Key: "attacker", Cost: 1}) {
					return
				}
			}
			for i := range rate {
				t := edge + time.Duration(i)*spread/time.Duration(rate)
				if !yield(Arrival{T: t, Key: "attacker", Cost: 1}) {
					return
				}
			}
		}
	}
}

// Zipf sends n requests at an average total rate per second, each from a
// client drawn with Zipf exponent s over clients: a few heavy clients and
// a long tail, as real API traffic has.
func Zipf(n int, rate float64, clients int, s float64, seed uint64) Traffic {
	keys := clientKeys(clients)
	return func(yield func(Arrival) bool) {
		r := rand.New(rand.NewPCG(seed, 3))
		z := rand.NewZipf(r, s, 1, uint64(clients-1))
		t := time.Duration(0)
		for range n {
			t += time.Duration(r.ExpFloat64() / rate * float64(time.Second))
			if !yield(Arrival{T: t, Key: keys[z.Uint64()], Cost: 1}) {
				return
			}
		}
	}
}

// Trace replays lines of "time,key[,cost]", time in seconds from the
// start (a decimal) or as a Go duration ("1.5s"), in order. Blank lines
// and lines starting with # are skipped. A bad line ends the stream with
// the error reported through errp, naming the line.
func Trace(r io.Reader, errp *error) Traffic {
	return func(yield func(Arrival) bool) {
		sc := bufio.NewScanner(r)
		last := time.Duration(math.MinInt64)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			a, err := parseTraceLine(line)
			if err == nil && a.T < last {
				err = fmt.Errorf("time %v goes back before %v", a.T, last)
			}
			if err != nil {
				*errp = fmt.Errorf("trace line %d: %w", n, err)
				return
			}
			last = a.T
			if !yield(a) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			*errp = err
		}
	}
}

func parseTraceLine(line string) (Arrival, error) {
	f := strings.Split(line, ",")
	if len(f) < 2 || len(f) > 3 || f[1] == "" {
		return Arrival{}, fmt.Errorf("%q: want time,key[,cost]", line)
	}
	a := Arrival{Key: f[1], Cost: 1}
	if secs, err := strconv.ParseFloat(f[0], 64); err == nil {
		a.T = time.Duration(secs * float64(time.Second))
	} else if a.T, err = time.ParseDuration(f[0]); err != nil {
		return Arrival{}, fmt.Errorf("time %q: want seconds or a duration", f[0])
	}
	if len(f) == 3 {
		c, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || c < 0 {
			return Arrival{}, fmt.Errorf("cost %q: want a non-negative integer", f[2])
		}
		a.Cost = c
	}
	return a, nil
}
