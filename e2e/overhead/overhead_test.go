package overhead

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if code, ran := RunBare(); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestOverhead runs the study (see the package doc): with
// LLMTRACE_OVERHEAD=full as BENCHMARKS.md reports it, else every
// configuration once, briefly. Either way it checks the stack served every
// request whole and that each configuration exported what it should: no
// telemetry from the baseline or with tracing off, metrics without traces
// from metrics only, every trace at 100% and about the rate's share below.
func TestOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 20 processes")
	}
	full := os.Getenv("LLMTRACE_OVERHEAD") == "full"
	st := &Stack{Slots: 16, TokenDelay: 2 * time.Millisecond, Streams: 16, Warmup: 500 * time.Millisecond, Measure: 1500 * time.Millisecond}
	rounds, out := 1, t.TempDir()
	if full {
		st.Slots, st.Streams, st.Warmup, st.Measure = 64, 64, 5*time.Second, 15*time.Second
		rounds, out = 5, filepath.Join("..", "..", "docs") // what BENCHMARKS.md shows
	}
	if dir := os.Getenv("LLMTRACE_OVERHEAD_OUT"); dir != "" {
		out = dir
	}
	st.LogDir = t.TempDir()
	st.LLMTrace, st.Server = buildBinaries(t)
	var err error
	if st.Self, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	if st.Receiver, err = StartReceiver(); err != nil {
		t.Fatal(err)
	}
	defer st.Receiver.Stop()

	t.Logf("load average %s at the start", loadAverage())
	configs := Configs()
	var results []*Result
	for round := range rounds {
		for i := range configs {
			c := configs[(i+round)%len(configs)] // each configuration at another place each round
			r, err := st.Run(context.Background(), c, round)
			if err != nil {
				t.Fatal(err)
			}
			checkExports(t, c, r, st.Streams)
			t.Logf("round %d %-10s %6.0f tok/s, TTFT p99 %6.1f ms, ITL p99 %5.2f ms, CPU %5.0f + %5.0f µs/req, %d traces of %d requests sent, load %s",
				round, c.Name(), r.TokPerSec, r.TTFTp99, r.ITLp99, r.Proxy.CPU, r.Server.CPU, r.Traces, r.Served, r.Load)
			results = append(results, r)
		}
	}
	sums := Summarize(results)
	table := Markdown(sums)
	t.Logf("load average %s at the end\n%s", loadAverage(), table)
	writeOutputs(t, out, sums, table, st, rounds)
}

// checkExports holds each configuration to what it must have exported.
func checkExports(t *testing.T, c Config, r *Result, streams int) {
	t.Helper()
	for name, p := range map[string]ProcessCost{"proxy": r.Proxy, "server": r.Server} {
		if p.CPU <= 0 || p.Allocs <= 0 || p.Bytes <= 0 || p.MaxRSS <= 0 {
			t.Errorf("%s %s: costs %+v", c.Name(), name, p)
		}
	}
	switch {
	case !c.Exports():
		if r.Spans != 0 || r.MetricExports != 0 {
			t.Errorf("%s exported %d spans, %d metric exports", c.Name(), r.Spans, r.MetricExports)
		}
	case c.Family == Metrics:
		if r.Spans != 0 || r.MetricExports < 2 {
			t.Errorf("metrics only: %d spans, %d metric exports (want none, and both processes')", r.Spans, r.MetricExports)
		}
	case c.Rate == 1:
		// Every request sent, but those the window's end cut before the
		// proxy had them.
		if r.Traces > r.Served || r.Traces < r.Served-2*streams || r.MetricExports < 2 {
			t.Errorf("%s: %d traces for %d requests sent, %d metric exports", c.Name(), r.Traces, r.Served, r.MetricExports)
		}
	default:
		// Trace ids are random: the kept share within five standard
		// deviations of the rate.
		want := c.Rate * float64(r.Served)
		slack := 5*math.Sqrt(want) + 5
		if math.Abs(float64(r.Traces)-want) > slack || r.MetricExports < 2 {
			t.Errorf("%s: %d traces of %d requests sent (want %.0f ± %.0f), %d metric exports", c.Name(), r.Traces, r.Served, want, slack, r.MetricExports)
		}
	}
}

func buildBinaries(t *testing.T) (llmtrace, server string) {
	t.Helper()
	dir := t.TempDir()
	llmtrace, server = filepath.Join(dir, "llmtrace"), filepath.Join(dir, "httpserver")
	for bin, pkg := range map[string]string{llmtrace: "./cmd/llmtrace", server: "./examples/httpserver"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return llmtrace, server
}

func writeOutputs(t *testing.T, dir string, sums []Summary, table string, st *Stack, rounds int) {
	t.Helper()
	js, err := json.MarshalIndent(sums, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	title := fmt.Sprintf("Tracing at saturation: toy engine (%d slots, %v/token) + llmtrace proxy, %d streams, 2 cores; medians of %d rounds",
		st.Slots, st.TokenDelay, st.Streams, rounds)
	for name, body := range map[string]string{"overhead.md": table, "overhead.json": string(js) + "\n", "overhead.svg": SVG(sums, title)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote overhead.md, overhead.json and overhead.svg to %s", dir)
}
