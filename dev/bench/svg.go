package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
)

// Point is one (x, y) of a plotted series.
type Point struct{ X, Y float64 }

// Series is one line of a plot.
type Series struct {
	Label  string
	Color  string // any SVG colour
	Dashed string // stroke-dasharray, "" for solid
	Points []Point
}

// HLine is a labelled horizontal reference line.
type HLine struct {
	Y     float64
	Label string
}

// Plot is a line chart with a linear y axis from 0 and x ticks at the
// points' x values.
type Plot struct {
	Title  string
	XLabel string
	YLabel string
	Series []Series
	// HLines are horizontal reference lines (targets).
	HLines []HLine
	// Note is a line of small text under the chart (machine, command).
	Note string
}

// SVG renders the plot as a standalone SVG document; no external
// dependency, no script, viewable in any browser and on GitHub.
func (p Plot) SVG() []byte {
	const (
		width, height = 760.0, 440.0
		left, right   = 70.0, 200.0 // right margin holds the legend
		top, bottom   = 46.0, 70.0
	)
	plotW, plotH := width-left-right, height-top-bottom

	xs := map[float64]bool{}
	maxY := 0.0
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xs[pt.X] = true
			if pt.Y > maxY && !math.IsInf(pt.Y, 0) && !math.IsNaN(pt.Y) {
				maxY = pt.Y
			}
		}
	}
	for _, h := range p.HLines {
		maxY = max(maxY, h.Y)
	}
	xticks := make([]float64, 0, len(xs))
	for x := range xs {
		xticks = append(xticks, x)
	}
	sort.Float64s(xticks)
	minX, maxX := 0.0, 1.0
	if len(xticks) > 0 {
		minX, maxX = xticks[0], xticks[len(xticks)-1]
	}
	if maxX == minX {
		minX, maxX = minX-1, maxX+1
	}
	yStep := niceStep(maxY / 5)
	yTop := yStep * math.Ceil(maxY/yStep)
	if yTop <= 0 {
		yTop, yStep = 1, 0.2
	}
	px := func(x float64) float64 { return left + (x-minX)/(maxX-minX)*plotW }
	py := func(y float64) float64 { return top + plotH - y/yTop*plotH }

	var b bytes.Buffer
	f := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	f(`<rect x="0" y="0" width="%g" height="%g" fill="white"/>`+"\n", width, height)
	f(`<text x="%g" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(p.Title))
	// Grid and y ticks.
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, py(y), left+plotW, py(y))
		f(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(y)+4, esc(fmtTick(y)))
	}
	// Axes.
	f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top, left, top+plotH)
	f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	for _, x := range xticks {
		f(`<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="black"/>`+"\n", px(x), top+plotH, px(x), top+plotH+5)
		f(`<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", px(x), top+plotH+18, esc(fmtTick(x)))
	}
	f(`<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", left+plotW/2, top+plotH+38, esc(p.XLabel))
	f(`<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">%s</text>`+"\n", top+plotH/2, top+plotH/2, esc(p.YLabel))
	for _, h := range p.HLines {
		f(`<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="4 4"/>`+"\n", left, py(h.Y), left+plotW, py(h.Y))
		f(`<text x="%g" y="%.1f" text-anchor="end" fill="#2ca02c" font-size="11">%s</text>`+"\n", left+plotW-4, py(h.Y)-4, esc(h.Label))
	}
	// Series.
	for i, s := range p.Series {
		pts := append([]Point(nil), s.Points...)
		sort.Slice(pts, func(a, c int) bool { return pts[a].X < pts[c].X })
		var coords bytes.Buffer
		for j, pt := range pts {
			if j > 0 {
				coords.WriteByte(' ')
			}
			fmt.Fprintf(&coords, "%.1f,%.1f", px(pt.X), py(pt.Y))
		}
		dash := ""
		if s.Dashed != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, esc(s.Dashed))
		}
		f(`<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", esc(s.Color), dash, coords.String())
		for _, pt := range pts {
			f(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s ms at %s</title></circle>`+"\n",
				px(pt.X), py(pt.Y), esc(s.Color), esc(s.Label), esc(fmtTick(pt.Y)), esc(fmtTick(pt.X)))
		}
		// Legend entry.
		ly := top + 10 + float64(i)*20
		lx := left + plotW + 20
		f(`<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+28, ly, esc(s.Color), dash)
		f(`<text x="%g" y="%g">%s</text>`+"\n", lx+34, ly+4, esc(s.Label))
	}
	if p.Note != "" {
		f(`<text x="%g" y="%g" font-size="10" fill="#555">%s</text>`+"\n", left, height-10, esc(p.Note))
	}
	f("</svg>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	for _, m := range []float64{1, 2, 5, 10} {
		if m*base >= raw {
			return m * base
		}
	}
	return 10 * base
}

func fmtTick(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return trimFloat(v)
}
