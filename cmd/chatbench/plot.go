package main

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot size: 768 × 480 pixels at gonum's 96 dpi.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// plotLatency draws the end-to-end percentiles of the steps against their
// rate into a PNG at path: one line per percentile, log scales, the target
// as a dashed line, and a cross on the p99 of each step that failed.
func plotLatency(path, title string, steps []step, target time.Duration) error {
	steps = slices.SortedFunc(slices.Values(steps), func(a, b step) int { return cmp.Compare(a.Rate, b.Rate) })
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "messages per second (offered, open loop)"
	p.Y.Label.Text = "latency, ms"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.X.Tick.Marker = plainTicks{plot.DefaultTicks{}}
	if len(steps) > 1 && steps[len(steps)-1].Rate >= 10*steps[0].Rate {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plainTicks{plot.LogTicks{Prec: -1}}
	}
	p.Add(plotter.NewGrid())

	series := []struct {
		name string
		get  func(q quantiles) float64
		c    color.RGBA
	}{
		{"p50", func(q quantiles) float64 { return q.P50 }, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
		{"p90", func(q quantiles) float64 { return q.P90 }, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}},
		{"p99", func(q quantiles) float64 { return q.P99 }, color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}},
		{"p99.9", func(q quantiles) float64 { return q.P999 }, color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}},
	}
	var lo, hi float64 = 1, 1
	for _, s := range series {
		var xys plotter.XYs
		for _, st := range steps {
			if st.EndToEnd.Count == 0 {
				continue
			}
			v := max(s.get(st.EndToEnd), 0.01) // log scale: no zero
			xys = append(xys, plotter.XY{X: st.Rate, Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		l.Color, pts.Color = s.c, s.c
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	var failed plotter.XYs
	for _, st := range steps {
		if !st.Pass && st.EndToEnd.Count > 0 {
			failed = append(failed, plotter.XY{X: st.Rate, Y: max(st.EndToEnd.P99, 0.01)})
		}
	}
	if len(failed) > 0 {
		sc, err := plotter.NewScatter(failed)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		sc.Shape = draw.CrossGlyph{}
		sc.Radius = vg.Points(6)
		sc.Color = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
		p.Add(sc)
		p.Legend.Add("step failed", sc)
	}
	if target > 0 && len(steps) > 0 {
		t := ms(target)
		line, err := plotter.NewLine(plotter.XYs{{X: steps[0].Rate, Y: t}, {X: steps[len(steps)-1].Rate, Y: t}})
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		line.Color = color.Gray{Y: 0x60}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("target p99 %v", target), line)
		lo, hi = min(lo, t), max(hi, t)
	}
	p.Y.Min, p.Y.Max = lo/2, hi*2
	if err := p.Save(plotWidth, plotHeight, path); err != nil {
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	return nil
}

// plainTicks labels ticks without trailing zeros (25, not 25.00).
type plainTicks struct{ plot.Ticker }

func (t plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := t.Ticker.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', -1, 64)
		}
	}
	return ticks
}
