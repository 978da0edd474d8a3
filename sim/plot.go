package sim

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluicehq/sluice"
)

var palette = []color.Color{
	color.RGBA{R: 214, G: 39, B: 40, A: 255},  // fixed window: red
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, // sliding log: blue
	color.RGBA{R: 44, G: 160, B: 44, A: 255},  // sliding window: green
	color.RGBA{R: 255, G: 127, B: 14, A: 255}, // token bucket: orange
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

// Plot draws each result's admitted-per-bin series over time, with the
// limit scaled to one bin as a dashed line, to path (.svg or .png).
func Plot(path, title string, limit sluice.Limit, bin time.Duration, results []Result) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = fmt.Sprintf("admitted per %v", bin)
	p.Legend.Top = true
	bins := 0
	for _, r := range results {
		bins = max(bins, len(r.Series))
	}
	for i, r := range results {
		pts := make(plotter.XYs, bins)
		for j := range pts {
			pts[j].X = (time.Duration(j) * bin).Seconds()
			if j < len(r.Series) {
				pts[j].Y = float64(r.Series[j])
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.2)
		p.Add(line)
		p.Legend.Add(r.Algorithm.String(), line)
	}
	perBin := float64(limit.Rate) * bin.Seconds() / limit.Period.Seconds()
	lim, err := plotter.NewLine(plotter.XYs{{X: 0, Y: perBin}, {X: (time.Duration(bins) * bin).Seconds(), Y: perBin}})
	if err != nil {
		return err
	}
	lim.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(lim)
	p.Legend.Add("the limit's rate", lim)
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if ext != "svg" && ext != "png" {
		return fmt.Errorf("sim: plot %q: want .svg or .png", path)
	}
	return p.Save(9*vg.Inch, 4*vg.Inch, path)
}
