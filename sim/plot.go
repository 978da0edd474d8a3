package sim

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/sluicehq/sluice"
)

var (
	ink     = color.RGBA{R: 31, G: 119, B: 180, A: 255} // what was admitted
	over    = color.RGBA{R: 214, G: 39, B: 40, A: 255}  // over the limit
	quiet   = color.Gray{Y: 110}                        // the limit's line, labels
	sans    = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansCSS = []byte("font-family:'Liberation Sans',Helvetica,Arial,sans-serif;")
)

// Plot writes the chart of results to path, .svg or .png; see Chart.
func Plot(path, title string, limit sluice.Limit, bin time.Duration, results []Result) error {
	ext := strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
	if ext != "svg" && ext != "png" {
		return fmt.Errorf("sim: plot %q: want .svg or .png", path)
	}
	var b bytes.Buffer
	if err := Chart(&b, ext, title, limit, bin, results); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Chart draws results as small multiples, one panel per algorithm on
// shared axes: over time, the most one client had admitted in the last
// period (Result.Window), against the limit drawn per client as a dashed
// line, with the part over it in red. Beside each panel, the numbers of
// the table: the most in any period, that against the limit, and the
// share admitted. format is "svg" or "png".
func Chart(w io.Writer, format, title string, limit sluice.Limit, bin time.Duration, results []Result) error {
	if len(results) == 0 {
		return fmt.Errorf("sim: nothing to chart")
	}
	const (
		width   = 9 * vg.Inch
		tableW  = 2.3 * vg.Inch
		headerH = 0.75 * vg.Inch
		panelH  = 1.05 * vg.Inch
	)
	// The bottom panel is taller by its time axis's label.
	axis := plot.New()
	setFont(axis)
	axisExtra := axis.X.Label.TextStyle.Height("time (s)") + axis.X.Label.Padding
	height := headerH + vg.Length(len(results))*panelH + axisExtra
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return fmt.Errorf("sim: chart: %w", err)
	}
	dc := draw.New(c)

	bins, most := 0, float64(limit.Rate)
	for _, r := range results {
		bins = max(bins, len(r.Window))
		most = max(most, float64(r.MaxInPeriod))
	}
	top := most * 1.12 // room above the highest step
	end := (time.Duration(bins) * bin).Seconds()

	// The header: title, and what is drawn, outside the panels.
	style := textStyle(13, color.Black)
	dc.FillText(style, vg.Point{X: 0.1 * vg.Inch, Y: height - 0.3*vg.Inch}, title)
	style = textStyle(9.5, quiet)
	dc.FillText(style, vg.Point{X: 0.1 * vg.Inch, Y: height - 0.55*vg.Inch},
		fmt.Sprintf("Each panel: the most one client had admitted in the last %v; dashed: the limit, %d per client; red: over it.", limit.Period, limit.Rate))

	// The table's header, over its column.
	cols := []struct {
		name string
		x    vg.Length
	}{{"max in any period", 0.95 * vg.Inch}, {"vs limit", 1.55 * vg.Inch}, {"admitted", 2.2 * vg.Inch}}
	tableX := width - tableW
	style = textStyle(9, quiet)
	style.XAlign = text.XRight
	for _, col := range cols {
		dc.FillText(style, vg.Point{X: tableX + col.x, Y: height - headerH + 0.05*vg.Inch}, col.name)
	}

	for i, r := range results {
		p := plot.New()
		setFont(p)
		p.Title.Text = r.Algorithm.String()
		p.Title.TextStyle.Font.Size = vg.Points(10.5)
		p.Title.Padding = vg.Points(2)
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, end, 0, top
		p.Y.Tick.Marker = plot.ConstantTicks(ticks(most, limit.Rate))
		last := i == len(results)-1
		if last {
			p.X.Label.Text = "time (s)"
		} else { // the time axis's ticks without their labels
			ts := plot.DefaultTicks{}.Ticks(0, end)
			for j := range ts {
				ts[j].Label = ""
			}
			p.X.Tick.Marker = plot.ConstantTicks(ts)
		}
		lim, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(limit.Rate)}, {X: end, Y: float64(limit.Rate)}})
		if err != nil {
			return fmt.Errorf("sim: chart: %w", err)
		}
		lim.Color, lim.Width = quiet, vg.Points(0.8)
		lim.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(lim)
		admitted, above := steps(r.Window, bin, float64(limit.Rate))
		lines := []plotter.XYs{admitted}
		lines = append(lines, above...)
		for j, xys := range lines {
			if len(xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("sim: chart: %w", err)
			}
			l.Color, l.Width = ink, vg.Points(1.3)
			if j > 0 {
				l.Color, l.Width = over, vg.Points(1.6)
			}
			p.Add(l)
		}

		y1 := height - headerH - vg.Length(i)*panelH
		y0 := y1 - panelH
		if last {
			y0 -= axisExtra
		}
		p.Draw(draw.Crop(dc, 0.12*vg.Inch, -tableW, y0, y1-height)) // room for a wider fallback face

		// The row of the table beside the panel.
		ratio := float64(r.MaxInPeriod) / float64(limit.Rate)
		cells := []string{fmt.Sprint(r.MaxInPeriod), fmt.Sprintf("%.2f×", ratio), pct(r.Admitted, r.Requests)}
		rowY := y1 - panelH/2
		for j, cell := range cells {
			st := textStyle(11, color.Black)
			st.XAlign = text.XRight
			if j == 1 && ratio > 1.005 {
				st.Color = over
			}
			dc.FillText(st, vg.Point{X: tableX + cols[j].x, Y: rowY}, cell)
		}
	}

	if format != "svg" {
		_, err = c.WriteTo(w)
		return err
	}
	// Name a sans-serif fallback after the font the SVG names, for
	// browsers that do not have it.
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return err
	}
	_, err = w.Write(bytes.ReplaceAll(b.Bytes(), []byte("font-family:Liberation Sans;"), sansCSS))
	return err
}

// steps returns window as a step line over time, and each run of bins
// over limit as a line of its own, from the limit up and back down.
func steps(window []int64, bin time.Duration, limit float64) (all plotter.XYs, above []plotter.XYs) {
	var run plotter.XYs
	for i, n := range window {
		x0, x1, y := (time.Duration(i) * bin).Seconds(), (time.Duration(i+1) * bin).Seconds(), float64(n)
		all = append(all, plotter.XY{X: x0, Y: y}, plotter.XY{X: x1, Y: y})
		if y <= limit {
			if run != nil {
				above = append(above, append(run, plotter.XY{X: x0, Y: limit}))
				run = nil
			}
			continue
		}
		if run == nil {
			run = plotter.XYs{{X: x0, Y: limit}}
		}
		run = append(run, plotter.XY{X: x0, Y: y}, plotter.XY{X: x1, Y: y})
	}
	if run != nil {
		above = append(above, append(run, plotter.XY{X: run[len(run)-1].X, Y: limit}))
	}
	return all, above
}

// ticks returns the y axis's ticks: 0, the limit, and most when it is
// well above the limit.
func ticks(most float64, limit int64) []plot.Tick {
	t := []plot.Tick{{Value: 0, Label: "0"}, {Value: float64(limit), Label: fmt.Sprint(limit)}}
	if most >= 1.5*float64(limit) {
		t = append(t, plot.Tick{Value: most, Label: fmt.Sprint(int64(most))})
	}
	return t
}

func pct(n, of int64) string {
	if of == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}

func textStyle(size float64, c color.Color) text.Style {
	f := sans
	f.Size = vg.Points(size)
	return text.Style{Color: c, Font: f, Handler: plot.DefaultTextHandler, YAlign: text.YCenter}
}

// setFont puts p's text in the sans-serif face.
func setFont(p *plot.Plot) {
	for _, st := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		size := st.Font.Size
		st.Font = sans
		st.Font.Size = size
	}
}
