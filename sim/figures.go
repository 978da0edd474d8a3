package sim

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice"
)

// figure is one simulation in docs/simulations.md.
type figure struct {
	name, title, about string
	limit              sluice.Limit
	traffic            func() Traffic
	bin                time.Duration
}

var figures = []figure{
	{
		name: "boundary", title: "The boundary attack",
		about:   "One client sends the whole limit just before each window edge and again just after, for 5 windows.",
		limit:   sluice.Limit{Rate: 10, Period: time.Second, Burst: 10},
		traffic: func() Traffic { return BoundaryAttack(10, time.Second, 5) },
		bin:     100 * time.Millisecond,
	},
	{
		name: "bursty", title: "Bursty traffic",
		about: "On/off traffic: 0.5 s of Poisson arrivals at 60/s, then 1.5 s of silence, for 20 s, from 3 clients (seed 1).",
		limit: sluice.Limit{Rate: 10, Period: time.Second, Burst: 10},
		traffic: func() Traffic {
			return OnOff(60, 500*time.Millisecond, 1500*time.Millisecond, 20*time.Second, 3, 1)
		},
		bin: 100 * time.Millisecond,
	},
	{
		name: "zipf", title: "Many clients near the limit",
		about:   "300,000 requests at 3,000/s from 1,000 clients with Zipf exponent 1.1 (seed 1): a few heavy clients far over the limit, a long tail under it.",
		limit:   sluice.Limit{Rate: 10, Period: time.Second, Burst: 10},
		traffic: func() Traffic { return Zipf(300_000, 3_000, 1_000, 1.1, 1) },
		bin:     time.Second,
	},
}

// Figures writes the simulation section of the docs: for each figure its
// table and, when imgDir is not empty, its chart as imgDir/sim-NAME.svg.
// The text depends only on the simulator, so a test can compare it with
// the committed docs.
func Figures(w io.Writer, imgDir string) error {
	for _, f := range figures {
		res, err := Run(Config{Limit: f.limit, Traffic: f.traffic(), Bin: f.bin})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "### %s\n\n%s Limit: %d per %v, burst %d.\n\n", f.title, f.about, f.limit.Rate, f.limit.Period, f.limit.Burst)
		fmt.Fprintf(w, "![%s](img/sim-%s.svg)\n\n```\n", f.title, f.name)
		Format(w, f.limit, res)
		fmt.Fprint(w, "```\n\n")
		if imgDir != "" {
			title := fmt.Sprintf("%s, limit %d per %v", f.title, f.limit.Rate, f.limit.Period)
			if err := Plot(filepath.Join(imgDir, "sim-"+f.name+".svg"), title, f.limit, f.bin, res); err != nil {
				return err
			}
		}
	}
	// The counter's error, and what sub-windows would buy, on the Zipf mix.
	zipf := figures[len(figures)-1]
	acc, err := SubWindows(zipf.limit, zipf.traffic(), []int{1, 4, 16, 64, 250})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "### Sub-windows against the exact log\n\nThe same Zipf traffic, counted by the exact log and by the sliding window counter split into N sub-windows (N = 1 is the counter sluice ships; larger N are a model, measured and not shipped: see algorithms.md).\n\n```\n")
	FormatAccuracy(w, acc)
	fmt.Fprint(w, "```\n")
	return nil
}
