package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/template"
)

// The plot's geometry, in SVG user units.
const (
	plotW, plotH                          = 820, 380
	plotLeft, plotRight, plotTop, plotBot = 64, 200, 36, 44
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

type plotLine struct {
	Label, Color, Dash, Points string
}

type plotTick struct {
	Pos   float64
	Label string
}

type plotData struct {
	W, H, X0, X1, Y0, Y1 float64
	Title                string
	Lines                []plotLine
	XTicks, YTicks       []plotTick
	LegendX              float64
}

// The template escapes nothing itself: every string in it is ours
// (labels, numbers, colors), none is the server's.
var plotTmpl = template.Must(template.New("plot").Funcs(template.FuncMap{
	"legendY": func(i int) float64 { return plotTop + 10 + float64(i)*18 },
	"add":     func(a, b float64) float64 { return a + b },
}).Parse(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="12">
<rect width="{{.W}}" height="{{.H}}" fill="white"/>
<text x="{{.X0}}" y="20" font-size="14">{{.Title}}</text>
<line x1="{{.X0}}" y1="{{.Y1}}" x2="{{.X1}}" y2="{{.Y1}}" stroke="black"/>
<line x1="{{.X0}}" y1="{{.Y0}}" x2="{{.X0}}" y2="{{.Y1}}" stroke="black"/>
{{range .XTicks}}<line x1="{{.Pos}}" y1="{{$.Y1}}" x2="{{.Pos}}" y2="{{$.Y0}}" stroke="#eee"/><text x="{{.Pos}}" y="{{$.Y1}}" dy="16" text-anchor="middle">{{.Label}}</text>
{{end}}{{range .YTicks}}<line x1="{{$.X0}}" y1="{{.Pos}}" x2="{{$.X1}}" y2="{{.Pos}}" stroke="#eee"/><text x="{{$.X0}}" y="{{.Pos}}" dx="-6" dy="4" text-anchor="end">{{.Label}}</text>
{{end}}<text x="{{.X1}}" y="{{.H}}" dy="-8" text-anchor="end">seconds since the run started</text>
<text x="14" y="{{.Y0}}" dy="-8">ms</text>
{{range $i, $l := .Lines}}<polyline fill="none" stroke="{{$l.Color}}" stroke-width="1.5"{{if $l.Dash}} stroke-dasharray="{{$l.Dash}}"{{end}} points="{{$l.Points}}"/>
<line x1="{{$.LegendX}}" y1="{{legendY $i}}" x2="{{add $.LegendX 24}}" y2="{{legendY $i}}" stroke="{{$l.Color}}" stroke-width="1.5"{{if $l.Dash}} stroke-dasharray="{{$l.Dash}}"{{end}}/><text x="{{add $.LegendX 30}}" y="{{legendY $i}}" dy="4">{{$l.Label}}</text>
{{end}}</svg>
`))

// writePlot draws each plotted kind's p50 (solid) and p99 (dashed) per
// second over the run as an SVG.
func writePlot(w io.Writer, rec *scaleRecorder, title string, seconds int) error {
	d := plotData{W: plotW, H: plotH, X0: plotLeft, X1: plotW - plotRight, Y0: plotTop, Y1: plotH - plotBot, Title: title}
	d.LegendX = d.X1 + 16
	type kindSeries struct {
		kind string
		pts  []secondPoint
	}
	var all []kindSeries
	top := 0.0
	for _, k := range plottedKinds {
		pts := rec.series(k)
		if len(pts) == 0 {
			continue
		}
		for _, p := range pts {
			top = math.Max(top, p.P99ms)
			seconds = max(seconds, p.Second+1)
		}
		all = append(all, kindSeries{k, pts})
	}
	yMax := niceCeil(top)
	seconds = max(seconds, 1)
	x := func(sec float64) float64 { return d.X0 + (d.X1-d.X0)*sec/float64(seconds) }
	y := func(v float64) float64 { return d.Y1 - (d.Y1-d.Y0)*v/yMax }
	step := niceCeil(float64(seconds) / 6)
	for sec := 0.0; sec <= float64(seconds); sec += step {
		d.XTicks = append(d.XTicks, plotTick{Pos: round1(x(sec)), Label: fmt.Sprintf("%g", sec)})
	}
	for i := 0; i <= 5; i++ {
		v := yMax * float64(i) / 5
		d.YTicks = append(d.YTicks, plotTick{Pos: round1(y(v)), Label: fmt.Sprintf("%g", round1(v))})
	}
	for i, s := range all {
		color := plotColors[i%len(plotColors)]
		for _, q := range []struct {
			label, dash string
			v           func(secondPoint) float64
		}{
			{"p50", "", func(p secondPoint) float64 { return p.P50ms }},
			{"p99", "5,3", func(p secondPoint) float64 { return p.P99ms }},
		} {
			var b strings.Builder
			for _, p := range s.pts {
				// Each second's point sits at its middle.
				fmt.Fprintf(&b, "%g,%g ", round1(x(float64(p.Second)+0.5)), round1(y(q.v(p))))
			}
			d.Lines = append(d.Lines, plotLine{Label: s.kind + " " + q.label, Color: color, Dash: q.dash, Points: strings.TrimSpace(b.String())})
		}
	}
	return plotTmpl.Execute(w, d)
}

// niceCeil is the smallest of 1, 2 or 5 times a power of ten that is at
// least v (1 for nothing measured).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
