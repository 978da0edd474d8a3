package main

import (
	"flag"
	"fmt"
	"io"
	"os"
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
	shape := fs.String("traffic", "boundary", "traffic shape: steady, poisson, onoff, boundary, zipf, or trace (with -trace)")
	dur := fs.Duration("duration", 10*time.Second, "simulated time (steady, poisson, onoff); zipf sends -requests")
	rate := fs.Float64("rate", 20, "requests per second over all clients (steady, poisson, onoff, zipf)")
	clients := fs.Int("clients", 1, "number of clients")
	requests := fs.Int("requests", 1_000_000, "zipf: requests to send")
	zipfS := fs.Float64("zipf-s", 1.1, "zipf: exponent (> 1); larger is more skewed")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same table")
	trace := fs.String("trace", "", "trace file of time,key[,cost] lines")
	out := fs.String("plot", "", "draw admitted per interval over time to this .svg or .png")
	bin := fs.Duration("bin", 0, "the plot's interval; default the period / 10")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice sim [flags]\n\nRuns algorithms side by side on the same traffic in simulated time and prints what each admitted.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	limit, err := sluice.ParseLimit(*limitS)
	if err != nil {
		fmt.Fprintln(stderr, "sluice sim:", err)
		return 2
	}
	var list []sluice.Algorithm
	if *algs != "all" {
		for _, name := range strings.Split(*algs, ",") {
			a, err := sluice.ParseAlgorithm(strings.TrimSpace(name))
			if err != nil {
				fmt.Fprintln(stderr, "sluice sim:", err)
				return 2
			}
			list = append(list, a)
		}
	}
	var traceErr error
	var traffic sim.Traffic
	switch *shape {
	case "steady":
		traffic = sim.Steady(*rate, *dur, *clients)
	case "poisson":
		traffic = sim.Poisson(*rate, *dur, *clients, *seed)
	case "onoff":
		traffic = sim.OnOff(*rate, limit.Period/2, limit.Period*3/2, *dur, *clients, *seed)
	case "boundary":
		traffic = sim.BoundaryAttack(limit.Rate, limit.Period, max(int(*dur/limit.Period), 1))
	case "zipf":
		traffic = sim.Zipf(*requests, *rate, max(*clients, 2), *zipfS, *seed)
	case "trace":
		f, err := os.Open(*trace)
		if err != nil {
			fmt.Fprintln(stderr, "sluice sim:", err)
			return 2
		}
		defer f.Close()
		traffic = sim.Trace(f, &traceErr)
	default:
		fmt.Fprintf(stderr, "sluice sim: unknown traffic %q\n", *shape)
		return 2
	}
	cfg := sim.Config{Algorithms: list, Limit: limit, Traffic: traffic, Bin: *bin}
	results, err := sim.Run(cfg)
	if err == nil {
		err = traceErr
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice sim:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s traffic, limit %d/%v\n\n", *shape, limit.Rate, limit.Period)
	sim.Format(stdout, limit, results)
	if *out != "" {
		b := *bin
		if b <= 0 {
			b = max(limit.Period/10, time.Millisecond)
		}
		if err := sim.Plot(*out, fmt.Sprintf("%s traffic, limit %d/%v", *shape, limit.Rate, limit.Period), limit, b, results); err != nil {
			fmt.Fprintln(stderr, "sluice sim:", err)
			return 1
		}
		fmt.Fprintln(stdout, "\nplot:", *out)
	}
	return 0
}
