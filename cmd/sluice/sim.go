package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
)

func simCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	algs := fs.String("algorithms", "all", "comma-separated algorithms to compare, or all")
	limitS := fs.String("limit", "10/1s", "the limit every algorithm enforces, as rate/period [burst n]")
	shape := fs.String("traffic", "boundary", "traffic shape: steady, poisson, onoff, boundary, zipf, benign (many sources, -over of them bursting), or trace (with -trace)")
	sources := fs.Int("sources", 20_000, "benign: number of sources")
	overS := fs.String("over", "0.1%", "benign: the share of sources that burst over the limit, such as 0.1% or 0.001")
	dur := fs.Duration("duration", 10*time.Second, "simulated time (steady, poisson, onoff); zipf sends -requests")
	rate := fs.Float64("rate", 20, "requests per second over all clients (steady, poisson, onoff, zipf)")
	clients := fs.Int("clients", 1, "number of clients")
	requests := fs.Int("requests", 1_000_000, "zipf: requests to send")
	zipfS := fs.Float64("zipf-s", 1.1, "zipf: exponent (> 1); larger is more skewed")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same table")
	trace := fs.String("trace", "", "trace file of time,key[,cost] lines")
	out := fs.String("plot", "", "draw admitted per interval over time to this .svg or .png")
	bin := fs.Duration("bin", 0, "the plot's interval; default the period / 10")
	subs := fs.String("subwindows", "", "also measure the sliding window counter with these numbers of sub-windows\n(comma-separated, each dividing the period) against the exact log: the accuracy they buy and the memory they cost")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice sim [flags]\n\nRuns algorithms side by side on the same traffic in simulated time and prints what each admitted.\n\nFlags:")
		fs.PrintDefaults()
	}
	if _, code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	limit, err := sluice.ParseLimit(*limitS)
	if err != nil {
		fail(stderr, "sim", err)
		return 2
	}
	var list []sluice.Algorithm
	if *algs != "all" {
		for _, name := range strings.Split(*algs, ",") {
			a, err := sluice.ParseAlgorithm(strings.TrimSpace(name))
			if err != nil {
				fail(stderr, "sim", err)
				return 2
			}
			list = append(list, a)
		}
	}
	var nsub []int
	if *subs != "" {
		for _, f := range strings.Split(*subs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(stderr, "sluice sim: -subwindows: %q is not a positive number\n", f)
				return 2
			}
			if limit.Period%(time.Duration(n)*time.Microsecond) != 0 {
				fmt.Fprintf(stderr, "sluice sim: -subwindows: %d sub-windows do not divide the period of %v into whole microseconds\n", n, limit.Period)
				return 2
			}
			nsub = append(nsub, n)
		}
	}
	var traceErr error
	// newTraffic returns the arrivals from the start: each measurement
	// runs over them once.
	var newTraffic func() (sim.Traffic, error)
	switch *shape {
	case "steady":
		newTraffic = func() (sim.Traffic, error) { return sim.Steady(*rate, *dur, *clients), nil }
	case "poisson":
		newTraffic = func() (sim.Traffic, error) { return sim.Poisson(*rate, *dur, *clients, *seed), nil }
	case "onoff":
		newTraffic = func() (sim.Traffic, error) {
			return sim.OnOff(*rate, limit.Period/2, limit.Period*3/2, *dur, *clients, *seed), nil
		}
	case "boundary":
		newTraffic = func() (sim.Traffic, error) {
			return sim.BoundaryAttack(limit.Rate, limit.Period, max(int(*dur/limit.Period), 1)), nil
		}
	case "zipf":
		newTraffic = func() (sim.Traffic, error) { return sim.Zipf(*requests, *rate, max(*clients, 2), *zipfS, *seed), nil }
	case "benign":
		over, err := parseShare(*overS)
		if err != nil {
			fmt.Fprintln(stderr, "sluice sim: -over:", err)
			return 2
		}
		newTraffic = func() (sim.Traffic, error) { return sim.Benign(limit, *sources, over, *dur, *seed), nil }
	case "trace":
		newTraffic = func() (sim.Traffic, error) {
			f, err := os.ReadFile(*trace)
			if err != nil {
				return nil, err
			}
			return sim.Trace(bytes.NewReader(f), &traceErr), nil
		}
	default:
		fmt.Fprintf(stderr, "sluice sim: unknown traffic %q\n", *shape)
		return 2
	}
	traffic, err := newTraffic()
	if err != nil {
		fail(stderr, "sim", err)
		return 2
	}
	cfg := sim.Config{Algorithms: list, Limit: limit, Traffic: traffic, Bin: *bin}
	results, err := sim.Run(cfg)
	if err == nil {
		err = traceErr
	}
	var accuracy []sim.Accuracy
	if err == nil && len(nsub) > 0 {
		if traffic, err = newTraffic(); err == nil {
			accuracy, err = sim.SubWindows(limit, traffic, nsub)
		}
		if err == nil {
			err = traceErr
		}
	}
	if err != nil {
		fail(stderr, "sim", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s traffic, limit %d/%v\n\n", *shape, limit.Rate, limit.Period)
	sim.Format(stdout, limit, results)
	if len(accuracy) > 0 {
		fmt.Fprint(stdout, "\nsub-windows against the exact log:\n\n")
		sim.FormatAccuracy(stdout, accuracy)
	}
	if *shape == "benign" {
		// Cloudflare's measure: one stream, every request counted, each
		// decision compared with the exact count's.
		var prs []sim.PerRequest
		for _, alg := range []sluice.Algorithm{sluice.SlidingWindow, sluice.FixedWindow} {
			for _, all := range []bool{true, false} {
				l := limit
				l.Algorithm, l.CountAll, l.Burst = alg, all, 0
				traffic, err := newTraffic()
				if err == nil {
					var p sim.PerRequest
					if p, err = sim.MeasurePerRequest(l, traffic); err == nil {
						prs = append(prs, p)
					}
				}
				if err != nil {
					fail(stderr, "sim", err)
					return 1
				}
			}
		}
		fmt.Fprint(stdout, "\nper request, against the exact count of every request (Cloudflare's measure):\n\n")
		sim.FormatPerRequest(stdout, prs)
	}
	if *out != "" {
		b := *bin
		if b <= 0 {
			b = max(limit.Period/10, time.Millisecond)
		}
		if err := sim.Plot(*out, fmt.Sprintf("%s traffic, limit %d/%v", *shape, limit.Rate, limit.Period), limit, b, results); err != nil {
			fail(stderr, "sim", err)
			return 1
		}
		fmt.Fprintln(stdout, "\nplot:", *out)
	}
	return 0
}

// parseShare reads a share as a percentage ("0.1%") or a fraction
// ("0.001"), between 0 and 1.
func parseShare(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if pct {
		v /= 100
	}
	if err != nil || v < 0 || v > 1 {
		return 0, fmt.Errorf("%q: want a share such as 0.1%% or 0.001", s)
	}
	return v, nil
}
