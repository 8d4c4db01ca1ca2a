package waterfall

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Colours of the phases in the HTML page (also what the screenshot test
// looks for).
var Colors = map[Phase]string{
	PhaseRequest:    "#5b6770",
	PhaseInput:      "#17a2b8",
	PhaseHandoff:    "#8fa8b8",
	PhaseQueue:      "#f0a030",
	PhasePreempted:  "#d9534f",
	PhasePrefill:    "#2f6fde",
	PhaseRecompute:  "#7b4fd6",
	PhaseDecode:     "#2e9e44",
	PhaseDetokenize: "#c678dd",
	PhaseKVTransfer: "#e83e8c",
	PhaseEncode:     "#8c564b",
	PhaseOther:      "#999999",
}

// Histogram and load chart colours.
const (
	ColorTTFT    = "#2f6fde"
	ColorITL     = "#2e9e44"
	ColorRunning = "#2f6fde"
	ColorWaiting = "#f0a030"
	ColorKV      = "#7b4fd6"
	ColorPreempt = "#d9534f"
)

// Page is what the HTML report shows.
type Page struct {
	Title    string
	Subtitle string
	// Summary is the preformatted percentile table; Serving, the serving
	// features' summary (P/D, speculative decoding, adapters, images).
	Summary, Serving string
	Waterfalls       []*Waterfall
	// TTFT and ITL are the samples of the histograms, in seconds.
	TTFT, ITL []float64
	// Load is each engine's scheduler state over the run.
	Load []Load
}

// Load is one engine's scheduler state over time, from the scheduler
// stats it reported at every step: point i covers [Start + i·Step,
// Start + (i+1)·Step) and holds the largest batch, queue and KV-cache use
// seen in it, and the preemptions.
type Load struct {
	Name         string
	Start        time.Time
	Step         time.Duration
	Running      []int
	Waiting      []int
	KVCacheUsage []float64 // 0 to 1
	Preemptions  []int
}

// Geometry of the SVGs.
const (
	svgWidth  = 1320
	charW     = 7.3 // px per character of the 12 px monospace labels
	numW      = 176
	rowH      = 22
	headH     = 26
	histW     = 640
	histH     = 270
	histPadL  = 64
	histPadB  = 40
	histPadT  = 26
	histBins  = 48
	labelRowH = 14
	minBarPix = 2

	loadH     = 250
	loadPadL  = 64
	loadPadR  = 64
	loadPadT  = 34
	loadPadB  = 36
	axisCharW = 6.7 // px per character of the 11 px axis labels
)

type svgRow struct {
	Y, TextY       int
	Label, Off     string
	Dur            string
	X, W           float64
	BarY, BarH     int
	Color          string
	Indent         int
	Marks          []float64
	MarkY1, MarkY2 int
	Title          string
	Phase          string
	IsRoot         bool
}

type svgWaterfall struct {
	*Waterfall
	Height         int
	Rows           []svgRow
	Ticks          []svgTick
	TrackX, TrackW int
	StartX, NumX   int
}

type svgTick struct {
	X, Y   float64
	Label  string
	Anchor string
}

type svgHist struct {
	Title  string
	Color  string
	Unit   string
	Bars   []svgBar
	Ticks  []svgTick
	YTicks []svgTick
	Lines  []svgLine
	Count  int
	YMax   int
	Width  int
	Height int
	Base   int
	Top    int
	PlotW  int
	PadL   int
	Mid    int // the y axis's middle, for its title
}

type svgBar struct {
	X, Y, W, H float64
	Title      string
}

// svgLine is a percentile: its dashed line from the label's row down to
// the axis, and its label.
type svgLine struct {
	X, LabelY float64
	Label     string
	Anchor    string
	DX        int
	Base      int
}

type svgLoad struct {
	Title        string
	Width        int
	Height       int
	PadL, Right  int
	Top, Base    int
	Ticks        []svgTick
	YTicks       []svgTick
	KVTicks      []svgTick
	Running      string // polyline points
	Waiting      string
	KV           string
	KVArea       string
	Preempts     []svgBar
	Legend       []legendItem
	MaxReq       int
	PeakRunning  int
	PeakWaiting  int
	PeakKV       float64
	TotalPreempt int
	Mid          int
}

type legendItem struct {
	Name, Color string
	X           float64
}

type pageData struct {
	*Page
	Generated  string
	SVGs       []svgWaterfall
	Hists      []svgHist
	Loads      []svgLoad
	Legend     []legendItem
	Width      int
	HistWidth  int
	HistHeight int
}

// WriteHTML writes p as one self-contained HTML page: inline CSS and SVG,
// no scripts, fonts or other network resources.
func WriteHTML(out io.Writer, p *Page) error {
	d := pageData{
		Page: p, Width: svgWidth, HistWidth: histW, HistHeight: histH,
		Generated: time.Now().UTC().Format(time.RFC3339),
	}
	for _, ph := range []Phase{PhaseRequest, PhaseInput, PhaseHandoff, PhaseQueue, PhaseKVTransfer, PhaseEncode, PhasePrefill,
		PhaseDecode, PhasePreempted, PhaseRecompute, PhaseDetokenize} {
		d.Legend = append(d.Legend, legendItem{Name: string(ph), Color: Colors[ph]})
	}
	for _, l := range p.Load {
		d.Loads = append(d.Loads, loadChart(l))
	}
	for _, w := range p.Waterfalls {
		d.SVGs = append(d.SVGs, layout(w))
	}
	if len(p.TTFT) > 0 {
		d.Hists = append(d.Hists, histogram("Time to first token", "requests", ColorTTFT, p.TTFT))
	}
	if len(p.ITL) > 0 {
		d.Hists = append(d.Hists, histogram("Inter-token latency", "gaps", ColorITL, p.ITL))
	}
	return pageTmpl.Execute(out, d)
}

func layout(w *Waterfall) svgWaterfall {
	// The label column fits the longest label, within bounds.
	labelW := 300
	for _, r := range w.Rows {
		labelW = max(labelW, 6+14*r.Depth+int(math.Ceil(float64(len([]rune(r.Label)))*charW))+12)
	}
	labelW = min(labelW, 640)
	s := svgWaterfall{Waterfall: w, Height: headH + rowH*len(w.Rows) + 8,
		TrackX: labelW + numW, StartX: labelW + 76, NumX: labelW + numW - 10}
	s.TrackW = svgWidth - s.TrackX - 10
	scale := 0.0
	if w.Total > 0 {
		scale = float64(s.TrackW) / float64(w.Total)
	}
	trackX, trackW := float64(s.TrackX), float64(s.TrackW)
	for _, t := range niceTicks(w.Total, 6) {
		tk := svgTick{X: trackX + float64(t)*scale, Label: tickLabel(t), Anchor: "middle"}
		if tk.X > trackX+trackW-30 {
			tk.Anchor = "end"
		}
		s.Ticks = append(s.Ticks, tk)
	}
	for i, r := range w.Rows {
		y := headH + i*rowH
		x := trackX + float64(r.Offset)*scale
		bw := math.Max(float64(r.Dur)*scale, minBarPix)
		x = math.Min(x, trackX+trackW-bw)
		sr := svgRow{
			Y: y, TextY: y + 15, Label: r.Label, Off: "+" + Dur(r.Offset), Dur: Dur(r.Dur),
			X: x, W: bw, BarY: y + 4, BarH: rowH - 8, Color: Colors[r.Phase], Indent: 6 + 14*r.Depth,
			Title:  fmt.Sprintf("%s: start +%s, duration %s", r.Label, Dur(r.Offset), Dur(r.Dur)),
			Phase:  string(r.Phase),
			IsRoot: r.Depth == 0,
			MarkY1: y + 2, MarkY2: y + rowH - 2,
		}
		if r.Phase == PhaseRequest {
			sr.BarY, sr.BarH = y+7, rowH-14
		}
		for _, m := range r.Marks {
			sr.Marks = append(sr.Marks, trackX+float64(m)*scale)
		}
		s.Rows = append(s.Rows, sr)
	}
	return s
}

// tickLabel is Dur without trailing zeros ("5s", "250ms").
func tickLabel(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := Dur(d)
	for _, unit := range []string{"ms", "s"} {
		if num, ok := strings.CutSuffix(s, unit); ok && strings.Contains(num, ".") {
			num = strings.TrimRight(strings.TrimRight(num, "0"), ".")
			return num + unit
		}
	}
	return s
}

// niceTicks returns about n round offsets in [0, total].
func niceTicks(total time.Duration, n int) []time.Duration {
	if total <= 0 {
		return []time.Duration{0}
	}
	step := time.Duration(niceStep(float64(total), n))
	var out []time.Duration
	for v := time.Duration(0); v <= total+total/10000; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep is a round step (1, 2 or 5 × 10^k) that cuts total into about n.
func niceStep(total float64, n int) float64 {
	raw := total / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// histogram bins xs (seconds) on a log scale.
func histogram(title, unit, color string, xs []float64) svgHist {
	h := svgHist{Title: title, Unit: unit, Color: color, Count: len(xs), Width: histW, Height: histH, Base: histH - histPadB,
		PlotW: histW - histPadL - 12, PadL: histPadL, Top: histPadT}
	vals := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) {
			vals = append(vals, x)
		}
	}
	if len(vals) == 0 {
		return h
	}
	slices.Sort(vals)
	lo, hi := math.Log10(vals[0]), math.Log10(vals[len(vals)-1])
	if hi-lo < 1e-9 {
		lo, hi = lo-0.5, hi+0.5
	}
	lo, hi = math.Floor(lo*4)/4, math.Ceil(hi*4)/4
	counts := make([]int, histBins)
	for _, v := range vals {
		i := int((math.Log10(v) - lo) / (hi - lo) * histBins)
		counts[min(max(i, 0), histBins-1)]++
	}
	h.YMax = slices.Max(counts)
	xOf := func(v float64) float64 { return histPadL + (math.Log10(v)-lo)/(hi-lo)*float64(h.PlotW) }

	// The percentile labels first: their rows decide where the plot
	// starts.
	rows := h.percentiles(vals, xOf)
	h.Top = histPadT + rows*labelRowH + 6
	h.Mid = (h.Top + h.Base) / 2
	plotH := float64(h.Base - h.Top)
	// Counts on a log scale (log1p, so a bin of one shows): ITLs pile up
	// in one bin, and the tail is what matters.
	yOf := func(c float64) float64 { return float64(h.Base) - plotH*math.Log1p(c)/math.Log1p(float64(h.YMax)) }
	for i := range h.Lines {
		h.Lines[i].Base = h.Base
	}
	bw := float64(h.PlotW) / histBins
	for i, c := range counts {
		if c == 0 {
			continue
		}
		y := math.Min(yOf(float64(c)), float64(h.Base)-1)
		from := math.Pow(10, lo+(hi-lo)*float64(i)/histBins)
		to := math.Pow(10, lo+(hi-lo)*float64(i+1)/histBins)
		h.Bars = append(h.Bars, svgBar{
			X: histPadL + float64(i)*bw + 0.5, W: bw - 1, Y: y, H: float64(h.Base) - y,
			Title: fmt.Sprintf("%s – %s: %d %s", Dur(secs(from)), Dur(secs(to)), c, unit),
		})
	}
	for _, c := range countTicks(h.YMax) {
		h.YTicks = append(h.YTicks, svgTick{X: histPadL - 6, Y: yOf(float64(c)), Label: fmt.Sprint(c), Anchor: "end"})
	}
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if l := math.Log10(v); l < lo-1e-9 || l > hi+1e-9 {
				continue
			}
			tk := svgTick{X: xOf(v), Label: tickLabel(secs(v)), Anchor: "middle"}
			if tk.X > histPadL+float64(h.PlotW)-20 {
				tk.Anchor = "end"
			}
			h.Ticks = append(h.Ticks, tk)
		}
	}
	return h
}

// percentiles lays out the p50, p90 and p99 labels in rows above the plot
// so that no two overlap: each goes in the first row where it clears the
// labels already there. It returns the rows used.
func (h *svgHist) percentiles(vals []float64, xOf func(float64) float64) int {
	type span struct{ from, to float64 }
	var rows [][]span
	right := float64(histPadL + h.PlotW)
	for _, q := range []float64{50, 90, 99} {
		rank := int(math.Ceil(q / 100 * float64(len(vals))))
		v := vals[min(max(rank, 1), len(vals))-1]
		l := svgLine{X: xOf(v), Label: fmt.Sprintf("p%.0f %s", q, Dur(secs(v))), Anchor: "start", DX: 3}
		w := float64(len([]rune(l.Label)))*axisCharW + 4
		from, to := l.X, l.X+w
		if to > right+8 {
			l.Anchor, l.DX = "end", -3
			from, to = l.X-w, l.X
		}
		row := 0
		for ; row < len(rows); row++ {
			clear := true
			for _, s := range rows[row] {
				if from < s.to+4 && to > s.from-4 {
					clear = false
					break
				}
			}
			if clear {
				break
			}
		}
		if row == len(rows) {
			rows = append(rows, nil)
		}
		rows[row] = append(rows[row], span{from, to})
		l.LabelY = float64(histPadT + (row+1)*labelRowH)
		h.Lines = append(h.Lines, l)
	}
	return len(rows)
}

// countTicks are the y axis's labelled counts on its log scale: powers of
// ten up to max, with 2 and 5 between them when there are few decades, and
// max itself.
func countTicks(maxCount int) []int {
	if maxCount < 1 {
		return nil
	}
	decades := math.Log10(float64(maxCount))
	out := []int{}
	for p := 1; p <= maxCount; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m > 1 && decades >= 2 {
				continue
			}
			// Not so near max (on the axis's log1p scale) that the
			// labels would touch.
			if v := m * p; v <= maxCount && math.Log1p(float64(v)) <= 0.9*math.Log1p(float64(maxCount)) {
				out = append(out, v)
			}
		}
	}
	return append(out, maxCount)
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// loadChart draws an engine's running and waiting requests (left axis)
// and KV-cache use (right axis) over the run, with its preemptions as
// ticks on the time axis.
func loadChart(l Load) svgLoad {
	c := svgLoad{Title: l.Name, Width: svgWidth, Height: loadH, PadL: loadPadL, Right: svgWidth - loadPadR,
		Top: loadPadT, Base: loadH - loadPadB, Mid: (loadPadT + loadH - loadPadB) / 2}
	n := len(l.Running)
	if n == 0 || l.Step <= 0 {
		return c
	}
	for i := range n {
		c.PeakRunning = max(c.PeakRunning, l.Running[i])
		if i < len(l.Waiting) {
			c.PeakWaiting = max(c.PeakWaiting, l.Waiting[i])
		}
		if i < len(l.KVCacheUsage) {
			c.PeakKV = max(c.PeakKV, l.KVCacheUsage[i])
		}
		if i < len(l.Preemptions) {
			c.TotalPreempt += l.Preemptions[i]
		}
	}
	c.MaxReq = max(c.PeakRunning, c.PeakWaiting, 1)
	step := max(niceStep(float64(c.MaxReq), 4), 1)
	top := math.Ceil(float64(c.MaxReq)/step) * step
	plotW, plotH := float64(c.Right-c.PadL), float64(c.Base-c.Top)
	total := time.Duration(n) * l.Step
	x := func(i int) float64 { return float64(c.PadL) + (float64(i)+0.5)/float64(n)*plotW }
	yReq := func(v int) float64 { return float64(c.Base) - float64(v)/top*plotH }
	yKV := func(u float64) float64 { return float64(c.Base) - min(max(u, 0), 1)*plotH }
	var run, wait, kv strings.Builder
	for i := range n {
		fmt.Fprintf(&run, "%.1f,%.1f ", x(i), yReq(l.Running[i]))
		if i < len(l.Waiting) {
			fmt.Fprintf(&wait, "%.1f,%.1f ", x(i), yReq(l.Waiting[i]))
		}
		if i < len(l.KVCacheUsage) {
			fmt.Fprintf(&kv, "%.1f,%.1f ", x(i), yKV(l.KVCacheUsage[i]))
		}
		if i < len(l.Preemptions) && l.Preemptions[i] > 0 {
			c.Preempts = append(c.Preempts, svgBar{X: x(i) - 1, Y: float64(c.Base) - 8, W: 2, H: 8,
				Title: fmt.Sprintf("+%s: %d preemption(s)", clockLabel(time.Duration(i)*l.Step, total), l.Preemptions[i])})
		}
	}
	c.Running, c.Waiting, c.KV = strings.TrimSpace(run.String()), strings.TrimSpace(wait.String()), strings.TrimSpace(kv.String())
	if c.KV != "" {
		c.KVArea = fmt.Sprintf("%.1f,%d %s %.1f,%d", x(0), c.Base, c.KV, x(len(l.KVCacheUsage)-1), c.Base)
	}
	for v := 0.0; v <= top+step/1000; v += step {
		c.YTicks = append(c.YTicks, svgTick{X: float64(c.PadL) - 6, Y: yReq(int(v)), Label: fmt.Sprint(int(v)), Anchor: "end"})
	}
	for _, u := range []float64{0, 0.25, 0.5, 0.75, 1} {
		c.KVTicks = append(c.KVTicks, svgTick{X: float64(c.Right) + 6, Y: yKV(u), Label: fmt.Sprintf("%.0f%%", 100*u), Anchor: "start"})
	}
	for _, t := range niceTicks(total, 10) {
		tk := svgTick{X: float64(c.PadL) + float64(t)/float64(total)*plotW, Label: clockLabel(t, total), Anchor: "middle"}
		if tk.X > float64(c.Right)-24 {
			tk.Anchor = "end"
		}
		c.Ticks = append(c.Ticks, tk)
	}
	lx := float64(c.PadL)
	for _, it := range []legendItem{
		{Name: fmt.Sprintf("running (peak %d)", c.PeakRunning), Color: ColorRunning},
		{Name: fmt.Sprintf("waiting (peak %d)", c.PeakWaiting), Color: ColorWaiting},
		{Name: fmt.Sprintf("KV-cache use, right axis (peak %.0f%%)", 100*c.PeakKV), Color: ColorKV},
		{Name: fmt.Sprintf("preemptions (%d)", c.TotalPreempt), Color: ColorPreempt},
	} {
		it.X = lx
		c.Legend = append(c.Legend, it)
		lx += 22 + float64(len([]rune(it.Name)))*axisCharW + 18
	}
	return c
}

// clockLabel is an offset on a run's time axis: h:mm:ss for long runs,
// tickLabel's form for short ones.
func clockLabel(d, total time.Duration) string {
	if total < 2*time.Minute {
		return tickLabel(d)
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
	"f":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"fa":  func(v float64, d int) string { return fmt.Sprintf("%.1f", v+float64(d)) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
  body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px 24px; color: #222; background: #fff; }
  h1 { font-size: 20px; margin: 0 0 4px; }
  h2 { font-size: 16px; margin: 18px 0 4px; }
  .sub { color: #555; font-size: 13px; margin-bottom: 8px; }
  .note { color: #444; font-size: 12px; margin: 2px 0 4px; white-space: pre-line; }
  .legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
  .legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; border-radius: 2px; }
  svg text { font-family: Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px; fill: #222; }
  svg .num { fill: #555; }
  svg .hdr { fill: #555; font-size: 11px; font-weight: bold; }
  svg .axis { fill: #777; font-size: 11px; }
  svg .plab { fill: #222; font-size: 11px; }
  .hists { display: flex; flex-wrap: wrap; gap: 16px; }
  pre { font-size: 12px; background: #f6f8fa; padding: 8px 12px; border-radius: 4px; overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<div class="sub">{{.Subtitle}}</div>
{{if .Loads}}<h2>Engine load over time</h2>
<div class="sub">What the scheduler reported after every step (SchedulerStats): the largest batch and queue and the highest KV-cache use in each slice of the run; red ticks are preemptions.</div>
{{range .Loads}}
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="load of {{.Title}}" data-chart="load">
  <text x="{{.PadL}}" y="14" font-weight="bold">{{.Title}}</text>
  {{range .Legend}}<rect x="{{f .X}}" y="20" width="16" height="4" fill="{{.Color}}"/><text class="axis" x="{{fa .X 20}}" y="26">{{.Name}}</text>{{end}}
  {{$c := .}}{{range .YTicks}}<line x1="{{$c.PadL}}" y1="{{f .Y}}" x2="{{$c.Right}}" y2="{{f .Y}}" stroke="#eee"/><text class="axis" x="{{f .X}}" y="{{fa .Y 4}}" text-anchor="end">{{.Label}}</text>{{end}}
  {{range .KVTicks}}<text class="axis" x="{{f .X}}" y="{{fa .Y 4}}">{{.Label}}</text>{{end}}
  <text class="axis" transform="translate(14 {{.Mid}}) rotate(-90)" text-anchor="middle">requests</text>
  <text class="axis" transform="translate({{add .Width -10}} {{.Mid}}) rotate(90)" text-anchor="middle">KV-cache use</text>
  {{if .KVArea}}<polygon points="{{.KVArea}}" fill="#7b4fd6" fill-opacity="0.12" stroke="none"/>{{end}}
  <polyline points="{{.KV}}" fill="none" stroke="#7b4fd6" stroke-width="1.5" data-series="kv"/>
  <polyline points="{{.Waiting}}" fill="none" stroke="#f0a030" stroke-width="1.5" data-series="waiting"/>
  <polyline points="{{.Running}}" fill="none" stroke="#2f6fde" stroke-width="2" data-series="running"/>
  {{range .Preempts}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="#d9534f"><title>{{.Title}}</title></rect>{{end}}
  <line x1="{{.PadL}}" y1="{{.Base}}" x2="{{.Right}}" y2="{{.Base}}" stroke="#999"/>
  {{range .Ticks}}<line x1="{{f .X}}" y1="{{$c.Base}}" x2="{{f .X}}" y2="{{add $c.Base 4}}" stroke="#999"/><text class="axis" x="{{f .X}}" y="{{add $c.Base 16}}" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
  <text class="axis" x="{{.Right}}" y="{{add .Base 32}}" text-anchor="end">simulated time since the first arrival</text>
</svg>
{{end}}{{end}}
<div class="legend">{{range .Legend}}<span><i style="background:{{.Color}}"></i>{{.Name}}</span>{{end}}</div>
{{range .SVGs}}
<h2>{{.Title}} — {{.RequestID}}</h2>
<div class="note">{{.Note}} · trace {{.TraceID}}</div>
<svg xmlns="http://www.w3.org/2000/svg" width="{{$.Width}}" height="{{.Height}}" viewBox="0 0 {{$.Width}} {{.Height}}" role="img" aria-label="waterfall of {{.RequestID}}">
  <text class="hdr" x="6" y="12">span</text><text class="hdr" x="{{.StartX}}" y="12" text-anchor="end">start</text><text class="hdr" x="{{.NumX}}" y="12" text-anchor="end">duration</text>
  {{$w := .}}{{range .Ticks}}<line x1="{{f .X}}" y1="16" x2="{{f .X}}" y2="{{$w.Height}}" stroke="#e4e4e4"/><text class="axis" x="{{f .X}}" y="12" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
  {{range .Rows}}
  <g><title>{{.Title}}</title>
    <text x="{{.Indent}}" y="{{.TextY}}">{{.Label}}</text>
    <text class="num" x="{{$w.StartX}}" y="{{.TextY}}" text-anchor="end">{{.Off}}</text>
    <text class="num" x="{{$w.NumX}}" y="{{.TextY}}" text-anchor="end">{{.Dur}}</text>
    <rect x="{{f .X}}" y="{{.BarY}}" width="{{f .W}}" height="{{.BarH}}" rx="2" fill="{{.Color}}" data-phase="{{.Phase}}"/>
    {{$r := .}}{{range .Marks}}<line x1="{{f .}}" y1="{{$r.MarkY1}}" x2="{{f .}}" y2="{{$r.MarkY2}}" stroke="#111" stroke-width="1"/>{{end}}
  </g>{{end}}
</svg>
{{end}}
{{if .Hists}}<h2>Distributions</h2>
<div class="hists">
{{range .Hists}}
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}} histogram">
  <text x="{{.PadL}}" y="16" font-weight="bold">{{.Title}} ({{.Count}} {{.Unit}})</text>
  {{$h := .}}{{range .YTicks}}<line x1="{{$h.PadL}}" y1="{{f .Y}}" x2="{{add $h.PadL $h.PlotW}}" y2="{{f .Y}}" stroke="#eee"/><text class="axis" x="{{f .X}}" y="{{fa .Y 4}}" text-anchor="end">{{.Label}}</text>{{end}}
  <text class="axis" transform="translate(14 {{.Mid}}) rotate(-90)" text-anchor="middle">{{.Unit}} (log scale)</text>
  <line x1="{{.PadL}}" y1="{{.Base}}" x2="{{add .PadL .PlotW}}" y2="{{.Base}}" stroke="#999"/>
  <line x1="{{.PadL}}" y1="{{.Top}}" x2="{{.PadL}}" y2="{{.Base}}" stroke="#999"/>
  {{$c := .Color}}{{range .Bars}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="{{$c}}"><title>{{.Title}}</title></rect>{{end}}
  {{$b := .Base}}{{range .Ticks}}<line x1="{{f .X}}" y1="{{$b}}" x2="{{f .X}}" y2="{{add $b 4}}" stroke="#999"/><text class="axis" x="{{f .X}}" y="{{add $b 16}}" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
  {{range .Lines}}<line x1="{{f .X}}" y1="{{fa .LabelY 3}}" x2="{{f .X}}" y2="{{.Base}}" stroke="#333" stroke-dasharray="3,3"/><text class="plab" x="{{f .X}}" y="{{f .LabelY}}" dx="{{.DX}}" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
</svg>
{{end}}
</div>{{end}}
{{if .Summary}}<h2>Summary</h2>
<pre>{{.Summary}}</pre>{{end}}
{{if .Serving}}<h2>Serving features</h2>
<pre>{{.Serving}}</pre>{{end}}
<div class="sub">Generated {{.Generated}} by llmtrace examples/simengine.</div>
</body>
</html>
`))
