package overhead

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SVG draws the study: throughput, TTFT p99 and ITL p99 against the
// sampling rate, head sampling and end-of-request (tail) sampling as
// lines, the baseline, tracing off and metrics only as dashed levels.
func SVG(ss []Summary, title string) string {
	panels := []struct {
		name, unit string
		get        func(*Summary) float64
	}{
		{"throughput", "tokens/s", func(s *Summary) float64 { return s.TokPerSec }},
		{"TTFT p99", "ms", func(s *Summary) float64 { return s.TTFTp99 }},
		{"ITL p99", "ms", func(s *Summary) float64 { return s.ITLp99 }},
	}
	const pw, ph, left, top, bottom = 300, 250, 58, 46, 40
	width := len(panels)*pw + 150
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, ph+top+bottom)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="18" font-size="13" font-weight="bold">%s</text>`+"\n", esc(title))
	for i, p := range panels {
		x0 := float64(i*pw + left)
		plotPanel(&b, ss, x0, top, pw-left-20, ph-20, p.name, p.unit, p.get)
	}
	legend(&b, float64(len(panels)*pw+5), top)
	b.WriteString("</svg>\n")
	return b.String()
}

var (
	lineColor  = map[Family]string{Head: "#1f77b4", Tail: "#ff7f0e"}
	levelColor = map[Family]string{Baseline: "#555555", Off: "#2ca02c", Metrics: "#9467bd"}
)

func plotPanel(b *strings.Builder, ss []Summary, x0, y0, w, h float64, name, unit string, get func(*Summary) float64) {
	hi := 0.0
	for i := range ss {
		hi = math.Max(hi, get(&ss[i]))
	}
	hi = niceCeil(hi * 1.1)
	if hi == 0 {
		hi = 1
	}
	rates := []float64{0.01, 0.1, 1}
	x := func(rate float64) float64 { return x0 + 15 + (math.Log10(rate)+2)/2*(w-30) }
	y := func(v float64) float64 { return y0 + h - v/hi*h }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s (%s)</text>`+"\n", x0, y0-10, esc(name), esc(unit))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for k := 0; k <= 4; k++ {
		v := hi * float64(k) / 4
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, x0+w, y(v), y(v), x0-4, y(v)+4, tick(v))
	}
	for _, r := range rates {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s%%</text>`+"\n", x(r), y0+h+14, tick(r*100))
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">sampling rate</text>`+"\n", x0+w/2, y0+h+30)
	for i := range ss {
		s := &ss[i]
		if c, ok := levelColor[s.Family]; ok {
			fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>`+"\n", x0, x0+w, y(get(s)), y(get(s)), c)
		}
	}
	for _, f := range []Family{Head, Tail} {
		var pts []string
		for i := range ss {
			if s := &ss[i]; s.Family == f {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Rate), y(get(s))))
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(s.Rate), y(get(s)), lineColor[f])
			}
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), lineColor[f])
		}
	}
}

func legend(b *strings.Builder, x, y float64) {
	items := []struct {
		label, color string
		dashed       bool
	}{
		{"head sampling", lineColor[Head], false}, {"end-of-request sampling", lineColor[Tail], false},
		{"baseline (no llmtrace)", levelColor[Baseline], true}, {"tracing off", levelColor[Off], true},
		{"metrics only", levelColor[Metrics], true},
	}
	for i, it := range items {
		yy := y + float64(i)*18
		dash := ""
		if it.dashed {
			dash = ` stroke-dasharray="5,4"`
		}
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x, x+22, yy, yy, it.color, dash, x+27, yy+4, esc(it.label))
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
