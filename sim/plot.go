package sim

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"codeberg.org/go-fonts/liberation/liberationsansregular"
	"golang.org/x/image/font/opentype"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/sluicehq/sluice"
)

// The chart is drawn with gonum's vector graphics alone, not its plot
// package: that package parses twelve fonts when any program that links
// it starts, and sluice serve links the simulator for its status page.
// The one face the chart uses is parsed when the first chart is drawn.

var (
	ink     = color.RGBA{R: 31, G: 119, B: 180, A: 255} // what was admitted
	over    = color.RGBA{R: 214, G: 39, B: 40, A: 255}  // over the limit
	quiet   = color.Gray{Y: 110}                        // the limit's line, labels
	sans    = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansCSS = []byte("font-family:'Liberation Sans',Helvetica,Arial,sans-serif;")
)

// fonts holds the chart's one face, parsed on first use.
var fonts = sync.OnceValues(func() (*font.Cache, error) {
	face, err := opentype.Parse(liberationsansregular.TTF)
	if err != nil {
		return nil, fmt.Errorf("sim: chart: the sans-serif face: %w", err)
	}
	return font.NewCache(font.Collection{{Font: sans, Face: face}}), nil
})

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
	if format != "svg" && format != "png" {
		return fmt.Errorf("sim: chart: unsupported format %q: want svg or png", format)
	}
	cache, err := fonts()
	if err != nil {
		return err
	}
	ch := chart{text: text.Plain{Fonts: cache}}
	const (
		width   = 9 * vg.Inch
		tableW  = 2.3 * vg.Inch
		headerH = 0.75 * vg.Inch
		panelH  = 1.05 * vg.Inch
	)
	// The bottom panel is taller by its time axis's label.
	axisLabel := ch.style(12, color.Black)
	axisExtra := axisLabel.Height("time (s)") + padding
	height := headerH + vg.Length(len(results))*panelH + axisExtra
	var c vg.CanvasWriterTo
	if format == "svg" {
		c = vgsvg.New(width, height)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.New(width, height)}
	}
	dc := draw.New(c)

	bins, most := 0, float64(limit.Rate)
	for _, r := range results {
		bins = max(bins, len(r.Window))
		most = max(most, float64(r.MaxInPeriod))
	}
	top := most * 1.12 // room above the highest step
	end := (time.Duration(bins) * bin).Seconds()
	xTicks := timeTicks(end)
	yTicks := ticks(most, limit.Rate)

	// The header: title, and what is drawn, outside the panels.
	dc.FillText(ch.style(13, color.Black), vg.Point{X: 0.1 * vg.Inch, Y: height - 0.3*vg.Inch}, title)
	dc.FillText(ch.style(9.5, quiet), vg.Point{X: 0.1 * vg.Inch, Y: height - 0.55*vg.Inch},
		fmt.Sprintf("Each panel: the most one client had admitted in the last %v; dashed: the limit, %d per client; red: over it.", limit.Period, limit.Rate))

	// The table's header, over its column.
	cols := []struct {
		name string
		x    vg.Length
	}{{"max in any period", 0.95 * vg.Inch}, {"vs limit", 1.55 * vg.Inch}, {"admitted", 2.2 * vg.Inch}}
	tableX := width - tableW
	style := ch.style(9, quiet)
	style.XAlign = text.XRight
	for _, col := range cols {
		dc.FillText(style, vg.Point{X: tableX + col.x, Y: height - headerH + 0.05*vg.Inch}, col.name)
	}

	for i, r := range results {
		last := i == len(results)-1
		y1 := height - headerH - vg.Length(i)*panelH
		y0 := y1 - panelH
		if last {
			y0 -= axisExtra
		}
		p := panel{
			title: r.Algorithm.String(), end: end, top: top,
			xTicks: xTicks, yTicks: yTicks, xLabels: last,
		}
		lines := []line{{xys: []vg.Point{{X: 0, Y: vg.Length(limit.Rate)}, {X: vg.Length(end), Y: vg.Length(limit.Rate)}},
			color: quiet, width: vg.Points(0.8), dashes: []vg.Length{vg.Points(4), vg.Points(3)}}}
		admitted, above := steps(r.Window, bin, float64(limit.Rate))
		lines = append(lines, line{xys: admitted, color: ink, width: vg.Points(1.3)})
		for _, xys := range above {
			lines = append(lines, line{xys: xys, color: over, width: vg.Points(1.6)})
		}
		ch.panel(draw.Crop(dc, 0.12*vg.Inch, -tableW, y0, y1-height), p, lines) // room for a wider fallback face

		// The row of the table beside the panel.
		ratio := float64(r.MaxInPeriod) / float64(limit.Rate)
		cells := []string{fmt.Sprint(r.MaxInPeriod), fmt.Sprintf("%.2f×", ratio), pct(r.Admitted, r.Requests)}
		rowY := y1 - panelH/2
		for j, cell := range cells {
			st := ch.style(11, color.Black)
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

// The panels' measures, those of gonum's plots.
var (
	padding   = vg.Points(5)
	tickLen   = vg.Points(8)
	axisWidth = vg.Points(0.5)
)

// chart draws text in the chart's face.
type chart struct {
	text text.Handler
}

func (ch chart) style(size float64, c color.Color) text.Style {
	f := sans
	f.Size = vg.Points(size)
	return text.Style{Color: c, Font: f, Handler: ch.text, YAlign: text.YCenter}
}

// panel is one algorithm's axes: time from 0 to end, admitted from 0 to
// top.
type panel struct {
	title          string
	end, top       float64
	xTicks, yTicks []tick
	xLabels        bool // the time axis's tick labels and its label
}

// line is a polyline in data coordinates: X in seconds, Y admitted.
type line struct {
	xys    []vg.Point
	color  color.Color
	width  vg.Length
	dashes []vg.Length
}

// tick is a mark on an axis; one without a label is a minor tick.
type tick struct {
	value float64
	label string
}

// panel draws p and its lines into c: the title over it, the admitted
// axis on the left, the time axis below, the lines clipped to the area
// between.
func (ch chart) panel(c draw.Canvas, p panel, lines []line) {
	title := ch.style(10.5, color.Black)
	title.XAlign, title.YAlign = text.XCenter, text.YTop
	tickLabel := ch.style(10, color.Black)

	area := c.Rectangle
	area.Max.Y -= title.Height(p.title) + vg.Points(2)
	var yw vg.Length
	for _, t := range p.yTicks {
		yw = max(yw, tickLabel.Width(t.label))
	}
	area.Min.X += yw + padding/2 + tickLen
	area.Min.Y += tickLen
	if p.xLabels {
		area.Min.Y += tickLabel.Height("0") + ch.style(12, color.Black).Height("time (s)") + padding
	}
	c.FillText(title, vg.Point{X: (area.Min.X + area.Max.X) / 2, Y: c.Max.Y}, p.title)

	at := func(x, y float64) vg.Point {
		return vg.Point{
			X: area.Min.X + vg.Length(x/p.end)*(area.Max.X-area.Min.X),
			Y: area.Min.Y + vg.Length(y/p.top)*(area.Max.Y-area.Min.Y),
		}
	}
	axis := draw.LineStyle{Color: color.Black, Width: axisWidth}

	// The admitted axis.
	c.StrokeLine2(axis, area.Min.X, area.Min.Y, area.Min.X, area.Max.Y)
	tickLabel.XAlign = text.XRight
	for _, t := range p.yTicks {
		pt := at(0, t.value)
		c.StrokeLine2(axis, pt.X-tickLen/2, pt.Y, pt.X, pt.Y)
		c.FillText(tickLabel, vg.Point{X: pt.X - tickLen/2 - padding/2, Y: pt.Y}, t.label)
	}

	// The time axis.
	c.StrokeLine2(axis, area.Min.X, area.Min.Y, area.Max.X, area.Min.Y)
	tickLabel.XAlign, tickLabel.YAlign = text.XCenter, text.YTop
	for _, t := range p.xTicks {
		pt := at(t.value, 0)
		n := tickLen
		if t.label == "" {
			n /= 2
		}
		c.StrokeLine2(axis, pt.X, pt.Y-n, pt.X, pt.Y)
		if p.xLabels && t.label != "" {
			c.FillText(tickLabel, vg.Point{X: pt.X, Y: pt.Y - tickLen}, t.label)
		}
	}
	if p.xLabels {
		label := ch.style(12, color.Black)
		label.XAlign, label.YAlign = text.XCenter, text.YBottom
		c.FillText(label, vg.Point{X: (area.Min.X + area.Max.X) / 2, Y: c.Min.Y + padding/2}, "time (s)")
	}

	// The lines, within the area.
	for _, l := range lines {
		pts := make([]vg.Point, len(l.xys))
		for i, xy := range l.xys {
			pts[i] = at(float64(xy.X), float64(xy.Y))
		}
		style := draw.LineStyle{Color: l.color, Width: l.width, Dashes: l.dashes}
		for _, part := range c.ClipLinesXY(pts) {
			c.StrokeLines(style, part)
		}
	}
}

// steps returns window as a step line over time, and each run of bins
// over limit as a line of its own, from the limit up and back down, in
// data coordinates.
func steps(window []int64, bin time.Duration, limit float64) (all []vg.Point, above [][]vg.Point) {
	var run []vg.Point
	lim := vg.Length(limit)
	for i, n := range window {
		x0, x1, y := vg.Length((time.Duration(i) * bin).Seconds()), vg.Length((time.Duration(i+1) * bin).Seconds()), vg.Length(n)
		all = append(all, vg.Point{X: x0, Y: y}, vg.Point{X: x1, Y: y})
		if float64(n) <= limit {
			if run != nil {
				above = append(above, append(run, vg.Point{X: x0, Y: lim}))
				run = nil
			}
			continue
		}
		if run == nil {
			run = []vg.Point{{X: x0, Y: lim}}
		}
		run = append(run, vg.Point{X: x0, Y: y}, vg.Point{X: x1, Y: y})
	}
	if run != nil {
		above = append(above, append(run, vg.Point{X: run[len(run)-1].X, Y: lim}))
	}
	return all, above
}

// ticks returns the admitted axis's ticks: 0, the limit, and most when it
// is well above the limit.
func ticks(most float64, limit int64) []tick {
	t := []tick{{0, "0"}, {float64(limit), fmt.Sprint(limit)}}
	if most >= 1.5*float64(limit) {
		t = append(t, tick{most, fmt.Sprint(int64(most))})
	}
	return t
}

// timeTicks returns the time axis's ticks from 0 to end seconds: labelled
// ones a round step apart (1, 2 or 5 times a power of ten), about three
// of them, and unlabelled ones between.
func timeTicks(end float64) []tick {
	if end <= 0 {
		return nil
	}
	mag := math.Pow(10, math.Floor(math.Log10(end/3)))
	step, minor := mag, mag/5
	for _, m := range []float64{2, 5, 10} {
		if end/(step) <= 4 {
			break
		}
		step = m * mag
		minor = step / m
		if m == 10 {
			minor = step / 5
		}
	}
	prec := max(0, -int(math.Floor(math.Log10(step))))
	var ts []tick
	for i := 0; ; i++ {
		v := float64(i) * minor
		if v > end*(1+1e-9) {
			break
		}
		label := ""
		if r := v / step; math.Abs(r-math.Round(r)) < 1e-9 {
			label = strconv.FormatFloat(v, 'f', prec, 64)
		}
		ts = append(ts, tick{v, label})
	}
	return ts
}

func pct(n, of int64) string {
	if of == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(of))
}
