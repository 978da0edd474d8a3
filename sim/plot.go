package sim

import (
	"bytes"
	"encoding/xml"
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
	"git.sr.ht/~sbinet/gg"
	"golang.org/x/image/font"
	"golang.org/x/image/font/opentype"

	"github.com/sluicehq/sluice"
)

// The chart is drawn by hand, in points (1/72 inch, y down), onto an SVG
// written here or a PNG rasterised by gg. No chart library is linked:
// gonum's plot package parses twelve fonts when any program that links it
// starts, and its text drawing links go-latex, which parses four more;
// sluice serve links the simulator for its status page. The one face the
// chart uses is parsed when the first chart is drawn.

var (
	ink     = color.RGBA{R: 31, G: 119, B: 180, A: 255}  // what was admitted
	over    = color.RGBA{R: 214, G: 39, B: 40, A: 255}   // over the limit
	quiet   = color.RGBA{R: 110, G: 110, B: 110, A: 255} // the limit's line, labels
	black   = color.RGBA{A: 255}
	sansCSS = "font-family:'Liberation Sans',Helvetica,Arial,sans-serif"
)

// face is the chart's one typeface, Liberation Sans, parsed on first use.
var face = sync.OnceValues(func() (*opentype.Font, error) {
	f, err := opentype.Parse(liberationsansregular.TTF)
	if err != nil {
		return nil, fmt.Errorf("sim: chart: the sans-serif face: %w", err)
	}
	return f, nil
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
	f, err := face()
	if err != nil {
		return err
	}
	const (
		width   = 9 * 72 // points
		tableW  = 2.3 * 72
		headerH = 0.75 * 72
		panelH  = 1.05 * 72
	)
	m := newFaces(f, 72)
	// The bottom panel is taller by its time axis's label.
	axisExtra := m.height(12) + padding
	height := headerH + float64(len(results))*panelH + axisExtra
	var c canvas
	if format == "svg" {
		c = newSVG(width, height)
	} else {
		c = newPNG(width, height, f)
	}
	ch := chart{c: c, m: m}

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
	ch.text(0.1*72, 0.3*72, 0, 0.5, 13, black, title)
	ch.text(0.1*72, 0.55*72, 0, 0.5, 9.5, quiet,
		fmt.Sprintf("Each panel: the most one client had admitted in the last %v; dashed: the limit, %d per client; red: over it.", limit.Period, limit.Rate))

	// The table's header, over its column.
	cols := []struct {
		name string
		x    float64
	}{{"max in any period", 0.95 * 72}, {"vs limit", 1.55 * 72}, {"admitted", 2.2 * 72}}
	tableX := width - tableW
	for _, col := range cols {
		ch.text(tableX+col.x, headerH-0.05*72, 1, 0.5, 9, quiet, col.name)
	}

	for i, r := range results {
		last := i == len(results)-1
		y0 := headerH + float64(i)*panelH
		y1 := y0 + panelH
		if last {
			y1 += axisExtra
		}
		p := panel{
			title: r.Algorithm.String(), end: end, top: top,
			xTicks: xTicks, yTicks: yTicks, xLabels: last,
		}
		lines := []line{{xys: [][2]float64{{0, float64(limit.Rate)}, {end, float64(limit.Rate)}},
			color: quiet, width: 0.8, dashes: []float64{4, 3}}}
		admitted, above := steps(r.Window, bin, float64(limit.Rate))
		lines = append(lines, line{xys: admitted, color: ink, width: 1.3})
		for _, xys := range above {
			lines = append(lines, line{xys: xys, color: over, width: 1.6})
		}
		ch.panel(box{x0: 0.12 * 72, y0: y0, x1: width - tableW, y1: y1}, p, lines) // room for a wider fallback face

		// The row of the table beside the panel.
		ratio := float64(r.MaxInPeriod) / float64(limit.Rate)
		cells := []string{fmt.Sprint(r.MaxInPeriod), fmt.Sprintf("%.2f×", ratio), pct(r.Admitted, r.Requests)}
		for j, cell := range cells {
			col := black
			if j == 1 && ratio > 1.005 {
				col = over
			}
			ch.text(tableX+cols[j].x, y0+panelH/2, 1, 0.5, 11, col, cell)
		}
	}
	return c.writeTo(w)
}

// The panels' measures, in points, as gonum's plots have them.
const (
	padding   = 5.0
	tickLen   = 8.0
	axisWidth = 0.5
)

// canvas is what the chart draws on, in points with y down: an SVG or a
// PNG.
type canvas interface {
	polyline(pts [][2]float64, c color.RGBA, width float64, dashes []float64)
	// text draws s on the baseline y, ax along its width at x (0 its
	// left end, 0.5 its middle, 1 its right end).
	text(x, y, ax, size float64, c color.RGBA, s string)
	writeTo(w io.Writer) error
}

// faces is the chart's face at each size it uses, at dpi dots an inch.
type faces struct {
	font   *opentype.Font
	dpi    float64
	bySize map[float64]font.Face // by size in points
}

func newFaces(f *opentype.Font, dpi float64) *faces {
	return &faces{font: f, dpi: dpi, bySize: map[float64]font.Face{}}
}

func (fs *faces) at(size float64) font.Face {
	f, ok := fs.bySize[size]
	if !ok {
		var err error
		if f, err = opentype.NewFace(fs.font, &opentype.FaceOptions{Size: size, DPI: fs.dpi, Hinting: font.HintingNone}); err != nil {
			panic(err) // only for a size or DPI below zero
		}
		fs.bySize[size] = f
	}
	return f
}

// width is s's, in dots (points at 72 dots an inch).
func (fs *faces) width(size float64, s string) float64 {
	return float64(font.MeasureString(fs.at(size), s)) / 64
}

// height is a line of text's, ascent and descent, in dots.
func (fs *faces) height(size float64) float64 {
	met := fs.at(size).Metrics()
	return float64(met.Ascent+met.Descent) / 64
}

// chart draws on c, measuring its text with m (at 72 dots an inch).
type chart struct {
	c canvas
	m *faces
}

// text draws s at x, y: ax is where x falls along its width (0 left, 1
// right), ay where y falls down its height (0 top, 1 bottom).
func (ch chart) text(x, y, ax, ay, size float64, c color.RGBA, s string) {
	met := ch.m.at(size).Metrics()
	ascent, descent := float64(met.Ascent)/64, float64(met.Descent)/64
	ch.c.text(x, y+ascent-ay*(ascent+descent), ax, size, c, s)
}

// box is an area of the canvas, y0 its top.
type box struct{ x0, y0, x1, y1 float64 }

// panel is one algorithm's axes: time from 0 to end, admitted from 0 to
// top.
type panel struct {
	title          string
	end, top       float64
	xTicks, yTicks []tick
	xLabels        bool // the time axis's tick labels and its label
}

// line is a polyline in data coordinates: seconds, admitted.
type line struct {
	xys    [][2]float64
	color  color.RGBA
	width  float64
	dashes []float64
}

// tick is a mark on an axis; one without a label is a minor tick.
type tick struct {
	value float64
	label string
}

// panel draws p and its lines into b: the title over it, the admitted
// axis on the left, the time axis below, the lines in the area between.
func (ch chart) panel(b box, p panel, lines []line) {
	area := b
	area.y0 += ch.m.height(10.5) + 2
	var yw float64
	for _, t := range p.yTicks {
		yw = max(yw, ch.m.width(10, t.label))
	}
	area.x0 += yw + padding/2 + tickLen
	area.y1 -= tickLen
	if p.xLabels {
		area.y1 -= ch.m.height(10) + ch.m.height(12) + padding
	}
	ch.text((area.x0+area.x1)/2, b.y0, 0.5, 0, 10.5, black, p.title)

	at := func(x, y float64) [2]float64 {
		return [2]float64{area.x0 + x/p.end*(area.x1-area.x0), area.y1 - y/p.top*(area.y1-area.y0)}
	}
	stroke := func(x0, y0, x1, y1 float64) {
		ch.c.polyline([][2]float64{{x0, y0}, {x1, y1}}, black, axisWidth, nil)
	}

	// The admitted axis.
	stroke(area.x0, area.y1, area.x0, area.y0)
	for _, t := range p.yTicks {
		pt := at(0, t.value)
		stroke(pt[0]-tickLen/2, pt[1], pt[0], pt[1])
		ch.text(pt[0]-tickLen/2-padding/2, pt[1], 1, 0.5, 10, black, t.label)
	}

	// The time axis.
	stroke(area.x0, area.y1, area.x1, area.y1)
	for _, t := range p.xTicks {
		pt := at(t.value, 0)
		n := tickLen
		if t.label == "" {
			n /= 2
		}
		stroke(pt[0], pt[1]+n, pt[0], pt[1])
		if p.xLabels && t.label != "" {
			ch.text(pt[0], pt[1]+tickLen, 0.5, 0, 10, black, t.label)
		}
	}
	if p.xLabels {
		ch.text((area.x0+area.x1)/2, b.y1-padding/2, 0.5, 1, 12, black, "time (s)")
	}

	for _, l := range lines {
		pts := make([][2]float64, len(l.xys))
		for i, xy := range l.xys {
			pts[i] = at(xy[0], xy[1])
		}
		ch.c.polyline(pts, l.color, l.width, l.dashes)
	}
}

// svg is a canvas written as SVG, its text in a sans-serif face.
type svg struct{ b bytes.Buffer }

func newSVG(width, height float64) *svg {
	s := &svg{}
	w, h := num(width), num(height)
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%spt" height="%spt" viewBox="0 0 %s %s">`+"\n", w, h, w, h)
	return s
}

func (s *svg) polyline(pts [][2]float64, c color.RGBA, width float64, dashes []float64) {
	s.b.WriteString(`<polyline fill="none" stroke-linejoin="round" points="`)
	for i, p := range pts {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		s.b.WriteString(num(p[0]) + "," + num(p[1]))
	}
	fmt.Fprintf(&s.b, `" stroke="%s" stroke-width="%g"`, hex(c), width)
	if len(dashes) > 0 {
		s.b.WriteString(` stroke-dasharray="`)
		for i, d := range dashes {
			if i > 0 {
				s.b.WriteByte(',')
			}
			s.b.WriteString(num(d))
		}
		s.b.WriteByte('"')
	}
	s.b.WriteString("/>\n")
}

func (s *svg) text(x, y, ax, size float64, c color.RGBA, str string) {
	anchor := "start"
	switch ax {
	case 0.5:
		anchor = "middle"
	case 1:
		anchor = "end"
	}
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" style="%s;font-size:%gpx" fill="%s">`, num(x), num(y), anchor, sansCSS, size, hex(c))
	xml.EscapeText(&s.b, []byte(str))
	s.b.WriteString("</text>\n")
}

func (s *svg) writeTo(w io.Writer) error {
	s.b.WriteString("</svg>\n")
	_, err := w.Write(s.b.Bytes())
	return err
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 32) }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// png is a canvas rasterised by gg at 96 dots an inch, on white.
type png struct {
	dc    *gg.Context
	faces *faces
}

const pngScale = 96.0 / 72 // dots a point

func newPNG(width, height float64, f *opentype.Font) *png {
	dc := gg.NewContext(int(math.Ceil(width*pngScale)), int(math.Ceil(height*pngScale)))
	dc.SetColor(color.White)
	dc.Clear()
	dc.SetLineJoinRound()
	return &png{dc: dc, faces: newFaces(f, 72*pngScale)}
}

func (p *png) polyline(pts [][2]float64, c color.RGBA, width float64, dashes []float64) {
	p.dc.NewSubPath()
	for _, pt := range pts {
		p.dc.LineTo(pt[0]*pngScale, pt[1]*pngScale)
	}
	p.dc.SetColor(c)
	p.dc.SetLineWidth(width * pngScale)
	d := make([]float64, len(dashes))
	for i, v := range dashes {
		d[i] = v * pngScale
	}
	p.dc.SetDash(d...)
	p.dc.Stroke()
}

func (p *png) text(x, y, ax, size float64, c color.RGBA, s string) {
	p.dc.SetFontFace(p.faces.at(size))
	p.dc.SetColor(c)
	p.dc.DrawStringAnchored(s, x*pngScale, y*pngScale, ax, 0)
}

func (p *png) writeTo(w io.Writer) error { return p.dc.EncodePNG(w) }

// steps returns window as a step line over time, and each run of bins
// over limit as a line of its own, from the limit up and back down, in
// data coordinates.
func steps(window []int64, bin time.Duration, limit float64) (all [][2]float64, above [][][2]float64) {
	var run [][2]float64
	for i, n := range window {
		x0, x1, y := (time.Duration(i) * bin).Seconds(), (time.Duration(i+1) * bin).Seconds(), float64(n)
		all = append(all, [2]float64{x0, y}, [2]float64{x1, y})
		if y <= limit {
			if run != nil {
				above = append(above, append(run, [2]float64{x0, limit}))
				run = nil
			}
			continue
		}
		if run == nil {
			run = [][2]float64{{x0, limit}}
		}
		run = append(run, [2]float64{x0, y}, [2]float64{x1, y})
	}
	if run != nil {
		above = append(above, append(run, [2]float64{run[len(run)-1][0], limit}))
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
	// The smallest of 1, 2, 5 and 10 times mag that leaves at most four
	// steps; between labels, minor ticks a fifth of a step apart, or a
	// half of a step of 2.
	mag := math.Pow(10, math.Floor(math.Log10(end/3)))
	step, minor := mag, mag/5
	for _, m := range []float64{2, 5, 10} {
		if end/step <= 4 {
			break
		}
		step, minor = m*mag, m*mag/5
		if m == 2 {
			minor = step / 2
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
