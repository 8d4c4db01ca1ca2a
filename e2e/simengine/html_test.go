package simengine

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/examples/simengine/demo"
	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
)

// TestHTMLRendersInChromium writes the HTML report of a run with
// preemptions, renders it in real headless Chromium and checks: no console
// message, exception or browser error while it loads; the picture is not
// blank; the bars of every phase the run has, the load chart's KV-cache
// area and its preemption ticks are on it; and the page says what its
// columns and axes are.
func TestHTMLRendersInChromium(t *testing.T) {
	bin := testbackend.RequireChromium(t)
	o := e2eOptions(400)
	page := writePage(t, o)
	html := readPage(t, page)
	for _, want := range []string{`>start</text>`, `>duration</text>`, `data-chart="load"`, `data-series="running"`, `data-series="waiting"`, `data-series="kv"`} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(html, `>start</text>`); n != 3 {
		t.Errorf("%d waterfalls with a start column header, want 3", n)
	}
	r := renderInChromium(t, bin, "file://"+page, 1400)
	checkRendered(t, r, []waterfall.Phase{waterfall.PhaseQueue, waterfall.PhasePrefill, waterfall.PhaseDecode, waterfall.PhasePreempted,
		waterfall.PhaseRecompute, waterfall.PhaseRequest}, 1)
}

// TestHTMLServingFeaturesInChromium renders the page of a P/D run with
// every serving feature: two load charts (prefill and decode), the KV
// transfer and encoder bars, the serving summary.
func TestHTMLServingFeaturesInChromium(t *testing.T) {
	bin := testbackend.RequireChromium(t)
	o := e2eOptions(300)
	allFeatures(&o)
	page := writePage(t, o)
	html := readPage(t, page)
	if n := strings.Count(html, `data-chart="load"`); n != 2 {
		t.Errorf("%d load charts, want one per instance (2)", n)
	}
	for _, want := range []string{"Serving features", "KV transfers", "speculative decoding", "LoRA adapters", "multimodal", "[router", "[decode"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	r := renderInChromium(t, bin, "file://"+page, 1400)
	checkRendered(t, r, []waterfall.Phase{waterfall.PhaseKVTransfer, waterfall.PhaseEncode, waterfall.PhasePrefill, waterfall.PhaseDecode,
		waterfall.PhaseQueue, waterfall.PhaseRequest}, 2)
}

// TestChromiumHarnessReportsProblems is the harness's own check: a page
// that logs an error, throws and references a missing image must come back
// with all three.
func TestChromiumHarnessReportsProblems(t *testing.T) {
	bin := testbackend.RequireChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "bad.html")
	bad := `<!DOCTYPE html><html><body><p>bad</p><img src="missing.png">` +
		`<script>console.error("boom-error"); console.log("fine-log"); undefinedFunction();</script></body></html>`
	if err := os.WriteFile(page, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r := renderInChromium(t, bin, "file://"+page, 800)
	all := strings.Join(r.Problems, "\n")
	t.Logf("problems:\n%s\nconsole: %v", all, r.Console)
	for _, want := range []string{"boom-error", "undefinedFunction", "missing.png"} {
		if !strings.Contains(all, want) {
			t.Errorf("the harness missed %q", want)
		}
	}
	if strings.Contains(all, "fine-log") || !strings.Contains(strings.Join(r.Console, "\n"), "fine-log") {
		t.Errorf("console.log should be recorded but not be a problem")
	}
}

func writePage(t *testing.T, o demo.Options) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "report.html")
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"} {
		t.Setenv(k, "") // no export, whatever the environment says
	}
	o.HTML = page
	if _, err := demo.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return page
}

func readPage(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	stripped := bytes.ReplaceAll(b, []byte(`xmlns="http://www.w3.org/2000/svg"`), nil)
	for _, bad := range []string{"http://", "https://", "<script", "<link"} {
		if bytes.Contains(stripped, []byte(bad)) {
			t.Errorf("the page is not self-contained: it has %q", bad)
		}
	}
	return string(b)
}

// checkRendered checks a screenshot: no problems while loading, not blank,
// the phases' bar colours, and loads charts' KV-cache area (the purple at
// 12% opacity over white) and red preemption ticks when preempting.
func checkRendered(t *testing.T, r *rendered, phases []waterfall.Phase, loads int) {
	t.Helper()
	if len(r.Problems) > 0 {
		t.Errorf("the page had %d problem(s) while loading:\n%s", len(r.Problems), strings.Join(r.Problems, "\n"))
	}
	if len(r.Console) > 0 {
		t.Errorf("the page logged to the console: %v", r.Console)
	}
	if dst := os.Getenv("SIMENGINE_SCREENSHOT"); dst != "" {
		_ = os.WriteFile(dst, r.PNG, 0o644)
	}
	img, err := png.Decode(bytes.NewReader(r.PNG))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 1000 {
		t.Fatalf("screenshot is %v", b)
	}
	nonWhite := 0
	found := map[string]int{}
	want := map[string]string{"kv-area": "#efeafa"}
	for _, ph := range phases {
		want[string(ph)] = waterfall.Colors[ph]
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl := rgb(img, x, y)
			if r < 245 || g < 245 || bl < 245 {
				nonWhite++
			}
			for name, hex := range want {
				if near(r, g, bl, hex) {
					found[name]++
				}
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %v: %.1f%% non-white; pixels by colour %v", b, 100*float64(nonWhite)/float64(total), found)
	if nonWhite < total/50 {
		t.Errorf("the screenshot is nearly blank: %d of %d pixels not white", nonWhite, total)
	}
	for name, hex := range want {
		min := 20
		if name == "kv-area" {
			min = 2000 * loads
		}
		if found[name] < min {
			t.Errorf("%s (%s) is missing from the screenshot: %d pixels", name, hex, found[name])
		}
	}
}

func rgb(img image.Image, x, y int) (r, g, b int) {
	R, G, B, _ := img.At(x, y).RGBA()
	return int(R >> 8), int(G >> 8), int(B >> 8)
}

// near reports whether r, g, b is within a small distance of #rrggbb.
func near(r, g, b int, hex string) bool {
	var cr, cg, cb int
	for i, p := range []*int{&cr, &cg, &cb} {
		for _, c := range hex[1+2*i : 3+2*i] {
			*p *= 16
			switch {
			case c >= '0' && c <= '9':
				*p += int(c - '0')
			default:
				*p += int(c-'a') + 10
			}
		}
	}
	abs := func(v int) int {
		if v < 0 {
			return -v
		}
		return v
	}
	return abs(r-cr) <= 6 && abs(g-cg) <= 6 && abs(b-cb) <= 6
}
