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
	PhaseOther:      "#999999",
}

// Histogram colours.
const (
	ColorTTFT = "#2f6fde"
	ColorITL  = "#2e9e44"
)

// Page is what the HTML report shows.
type Page struct {
	Title    string
	Subtitle string
	// Summary is the preformatted percentile table.
	Summary    string
	Waterfalls []*Waterfall
	// TTFT and ITL are the samples of the histograms, in seconds.
	TTFT, ITL []float64
}

// Geometry of the waterfall SVG.
const (
	svgWidth  = 1320
	labelW    = 470
	numW      = 170
	trackX    = labelW + numW
	trackW    = svgWidth - trackX - 10
	rowH      = 22
	headH     = 24
	histW     = 640
	histH     = 240
	histPadL  = 50
	histPadB  = 40
	histPadT  = 28
	histBins  = 48
	minBarPix = 2
)

type svgRow struct {
	Y, TextY        int
	Label, Off, Dur string
	X, W            float64
	BarY, BarH      int
	Color           string
	Indent          int
	Marks           []float64
	MarkY1, MarkY2  int
	Title           string
	Phase           string
	IsRoot          bool
}

type svgWaterfall struct {
	*Waterfall
	Height int
	Rows   []svgRow
	Ticks  []svgTick
}

type svgTick struct {
	X      float64
	Label  string
	Anchor string
}

type svgHist struct {
	Title  string
	Color  string
	Bars   []svgBar
	Ticks  []svgTick
	Lines  []svgLine
	Count  int
	YMax   int
	Width  int
	Height int
	Base   int
	PlotW  int
}

type svgBar struct {
	X, Y, W, H float64
	Title      string
}

type svgLine struct {
	X      float64
	Label  string
	Anchor string
	DX     int
}

type legendItem struct{ Name, Color string }

type pageData struct {
	*Page
	Generated  string
	SVGs       []svgWaterfall
	Hists      []svgHist
	Legend     []legendItem
	Width      int
	TrackX     int
	TrackW     int
	LabelW     int
	NumX       int
	HistWidth  int
	HistHeight int
}

// WriteHTML writes p as one self-contained HTML page: inline CSS and SVG,
// no scripts, fonts or other network resources.
func WriteHTML(out io.Writer, p *Page) error {
	d := pageData{
		Page: p, Width: svgWidth, TrackX: trackX, TrackW: trackW, LabelW: labelW, NumX: labelW + numW - 8,
		HistWidth: histW, HistHeight: histH,
		Generated: time.Now().UTC().Format(time.RFC3339),
	}
	for _, ph := range []Phase{PhaseRequest, PhaseInput, PhaseQueue, PhasePrefill, PhaseDecode, PhasePreempted, PhaseRecompute, PhaseDetokenize} {
		d.Legend = append(d.Legend, legendItem{Name: string(ph), Color: Colors[ph]})
	}
	for _, w := range p.Waterfalls {
		d.SVGs = append(d.SVGs, layout(w))
	}
	if len(p.TTFT) > 0 {
		d.Hists = append(d.Hists, histogram("Time to first token", ColorTTFT, p.TTFT))
	}
	if len(p.ITL) > 0 {
		d.Hists = append(d.Hists, histogram("Inter-token latency", ColorITL, p.ITL))
	}
	return pageTmpl.Execute(out, d)
}

func layout(w *Waterfall) svgWaterfall {
	s := svgWaterfall{Waterfall: w, Height: headH + rowH*len(w.Rows) + 8}
	scale := 0.0
	if w.Total > 0 {
		scale = float64(trackW) / float64(w.Total)
	}
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
		if sr.IsRoot {
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
	raw := float64(total) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []time.Duration
	for v := 0.0; v <= float64(total)*1.0001; v += step {
		out = append(out, time.Duration(v))
	}
	return out
}

// histogram bins xs (seconds) on a log scale.
func histogram(title, color string, xs []float64) svgHist {
	h := svgHist{Title: title, Color: color, Count: len(xs), Width: histW, Height: histH, Base: histH - histPadB, PlotW: histW - histPadL - 10}
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
	plotH := float64(histH - histPadB - histPadT)
	bw := float64(h.PlotW) / histBins
	xOf := func(v float64) float64 { return histPadL + (math.Log10(v)-lo)/(hi-lo)*float64(h.PlotW) }
	for i, c := range counts {
		if c == 0 {
			continue
		}
		// Counts on a log scale: ITLs pile up in one bin, and the tail
		// is what matters.
		bh := math.Max(plotH*math.Log1p(float64(c))/math.Log1p(float64(h.YMax)), 1)
		from := math.Pow(10, lo+(hi-lo)*float64(i)/histBins)
		to := math.Pow(10, lo+(hi-lo)*float64(i+1)/histBins)
		h.Bars = append(h.Bars, svgBar{
			X: histPadL + float64(i)*bw + 0.5, W: bw - 1, Y: float64(h.Base) - bh, H: bh,
			Title: fmt.Sprintf("%s – %s: %d", Dur(secs(from)), Dur(secs(to)), c),
		})
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
	for _, q := range []float64{50, 90, 99} {
		rank := int(math.Ceil(q / 100 * float64(len(vals))))
		v := vals[min(max(rank, 1), len(vals))-1]
		l := svgLine{X: xOf(v), Label: fmt.Sprintf("p%.0f %s", q, Dur(secs(v))), Anchor: "start", DX: 3}
		if l.X > histPadL+0.7*float64(h.PlotW) {
			l.Anchor, l.DX = "end", -3
		}
		h.Lines = append(h.Lines, l)
	}
	return h
}

func secs(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
	"sub": func(a, b int) int { return a - b },
	"f":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"step": func(i int) int {
		return 14 + 16*i
	},
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
  .note { color: #444; font-size: 12px; margin: 2px 0 4px; }
  .legend span { display: inline-block; margin-right: 14px; font-size: 12px; }
  .legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -2px; border-radius: 2px; }
  svg text { font-family: Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px; fill: #222; }
  svg .num { fill: #555; }
  svg .axis { fill: #777; font-size: 11px; }
  svg .plab { fill: #222; font-size: 11px; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
  .hists { display: flex; flex-wrap: wrap; gap: 16px; }
  pre { font-size: 12px; background: #f6f8fa; padding: 8px 12px; border-radius: 4px; overflow-x: auto; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<div class="sub">{{.Subtitle}}</div>
<div class="legend">{{range .Legend}}<span><i style="background:{{.Color}}"></i>{{.Name}}</span>{{end}}</div>
{{range .SVGs}}
<h2>{{.Title}} — {{.RequestID}}</h2>
<div class="note">{{.Note}} · trace {{.TraceID}}</div>
<svg xmlns="http://www.w3.org/2000/svg" width="{{$.Width}}" height="{{.Height}}" viewBox="0 0 {{$.Width}} {{.Height}}" role="img" aria-label="waterfall of {{.RequestID}}">
  {{$w := .}}{{range .Ticks}}<line x1="{{f .X}}" y1="16" x2="{{f .X}}" y2="{{$w.Height}}" stroke="#e4e4e4"/><text class="axis" x="{{f .X}}" y="12" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
  {{range .Rows}}
  <g><title>{{.Title}}</title>
    <text x="{{.Indent}}" y="{{.TextY}}">{{.Label}}</text>
    <text class="num" x="{{$.NumX}}" y="{{.TextY}}" text-anchor="end">{{.Off}}  {{.Dur}}</text>
    <rect x="{{f .X}}" y="{{.BarY}}" width="{{f .W}}" height="{{.BarH}}" rx="2" fill="{{.Color}}" data-phase="{{.Phase}}"/>
    {{$r := .}}{{range .Marks}}<line x1="{{f .}}" y1="{{$r.MarkY1}}" x2="{{f .}}" y2="{{$r.MarkY2}}" stroke="#111" stroke-width="1"/>{{end}}
  </g>{{end}}
</svg>
{{end}}
{{if .Hists}}<h2>Distributions</h2>
<div class="hists">
{{range .Hists}}
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}} histogram">
  <text x="50" y="16" font-weight="bold">{{.Title}} ({{.Count}} samples, log scale)</text>
  <line x1="50" y1="{{.Base}}" x2="{{add 50 .PlotW}}" y2="{{.Base}}" stroke="#999"/>
  {{$c := .Color}}{{range .Bars}}<rect x="{{f .X}}" y="{{f .Y}}" width="{{f .W}}" height="{{f .H}}" fill="{{$c}}"><title>{{.Title}}</title></rect>{{end}}
  {{$b := .Base}}{{range .Ticks}}<line x1="{{f .X}}" y1="{{$b}}" x2="{{f .X}}" y2="{{add $b 4}}" stroke="#999"/><text class="axis" x="{{f .X}}" y="{{add $b 16}}" text-anchor="{{.Anchor}}">{{.Label}}</text>{{end}}
  {{range $i, $l := .Lines}}<line x1="{{f $l.X}}" y1="28" x2="{{f $l.X}}" y2="{{$b}}" stroke="#333" stroke-dasharray="3,3"/><text class="plab" x="{{f $l.X}}" y="{{step $i}}" dx="{{$l.DX}}" dy="20" text-anchor="{{$l.Anchor}}">{{$l.Label}}</text>{{end}}
  <text class="axis" x="4" y="34">{{.YMax}}</text><text class="axis" x="4" y="48">(log)</text>
</svg>
{{end}}
</div>{{end}}
{{if .Summary}}<h2>Summary</h2>
<pre>{{.Summary}}</pre>{{end}}
<div class="sub">Generated {{.Generated}} by llmtrace examples/simengine.</div>
</body>
</html>
`))
