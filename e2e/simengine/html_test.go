package simengine

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/examples/simengine/demo"
	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
)

// TestHTMLRendersInChromium writes the HTML report, screenshots it in
// headless Chromium and checks the picture: not blank, and the bar colours
// of queueing, prefill, decode and preemption are there.
func TestHTMLRendersInChromium(t *testing.T) {
	bin := testbackend.RequireChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	o := e2eOptions(400)
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"} {
		t.Setenv(k, "") // no export, whatever the environment says
	}
	o.HTML = page
	if _, err := demo.Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"http://", "https://", "<script", "<link"} {
		if bytes.Contains(bytes.ReplaceAll(html, []byte(`xmlns="http://www.w3.org/2000/svg"`), nil), []byte(bad)) {
			t.Errorf("the page is not self-contained: it has %q", bad)
		}
	}

	shot := filepath.Join(dir, "out.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--hide-scrollbars",
		"--screenshot="+shot, "--window-size=1400,2200", "file://"+page)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	if dst := os.Getenv("SIMENGINE_SCREENSHOT"); dst != "" {
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(dst, b, 0o644)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 1000 {
		t.Fatalf("screenshot is %v", b)
	}
	nonWhite := 0
	found := map[waterfall.Phase]int{}
	want := []waterfall.Phase{waterfall.PhaseQueue, waterfall.PhasePrefill, waterfall.PhaseDecode, waterfall.PhasePreempted, waterfall.PhaseRecompute, waterfall.PhaseRequest}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl := rgb(img, x, y)
			if r < 245 || g < 245 || bl < 245 {
				nonWhite++
			}
			for _, ph := range want {
				if near(r, g, bl, waterfall.Colors[ph]) {
					found[ph]++
				}
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %v: %.1f%% non-white; bar pixels %v", b, 100*float64(nonWhite)/float64(total), found)
	if nonWhite < total/50 {
		t.Errorf("the screenshot is nearly blank: %d of %d pixels not white", nonWhite, total)
	}
	for _, ph := range want {
		if found[ph] < 20 {
			t.Errorf("%s bars (%s) are missing from the screenshot: %d pixels", ph, waterfall.Colors[ph], found[ph])
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
