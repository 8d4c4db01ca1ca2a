package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestMain keeps the tests' runs off any exporter set in the environment
// (otelconf reads the process environment).
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "LLMTRACE_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}

// smallRun is a few hundred requests on a KV cache small enough to preempt.
func smallRun(n int) Options {
	o := DefaultOptions()
	o.Requests = n
	o.Engine.NumBlocks = 1024
	o.Progress = false
	return o
}

func TestRunPrintsStatsSummaryAndWaterfalls(t *testing.T) {
	var out, errOut bytes.Buffer
	o := smallRun(400)
	o.Stdout, o.Stderr = &out, &errOut
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Logf("output:\n%s", s)
	if errOut.Len() > 0 {
		t.Errorf("stderr: %s", errOut.String())
	}
	if rep.Result.Rejections != 0 {
		t.Errorf("%d rejected updates", rep.Result.Rejections)
	}
	if rep.Summary.Requests != 400 || len(rep.Result.Requests) != 400 {
		t.Errorf("summary of %d requests, simulated %d", rep.Summary.Requests, len(rep.Result.Requests))
	}
	stats := regexp.MustCompile(`(?m)^INFO \d\d-\d\d \d\d:\d\d:\d\d \[sim \+0:0\d:\d0\] Avg prompt throughput: .* Prefix cache hit rate: \d+\.\d%$`)
	if n := len(stats.FindAllString(s, -1)); n < 2 || n != rep.StatsLines {
		t.Errorf("%d stats lines matched, %d printed", n, rep.StatsLines)
	}
	for _, want := range []string{
		"metric            count        p50        p90        p99        max",
		"\nTTFT ", "\nTPOT ", "\nITL ", "\nqueue ", "\ne2e ",
		"preemptions: ", "prefix-cache hit rate: ", "throughput: ",
		"slowest TTFT — req-", "a preempted request — req-", "a typical request — req-",
		"llm.queue (preempted)", "llm.decode #1", waterfall.Legend,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(rep.Waterfalls) != 3 {
		t.Fatalf("%d waterfalls, want 3", len(rep.Waterfalls))
	}
	// Waterfalls show exported spans: the slowest is the slowest.
	slowest := rep.Waterfalls[0]
	var maxTTFT float64
	for _, v := range rep.Summary.TTFT {
		maxTTFT = max(maxTTFT, v)
	}
	if !strings.Contains(slowest.Note, "TTFT "+waterfall.Dur(time.Duration(maxTTFT*1e9))) {
		t.Errorf("slowest waterfall note %q, max TTFT %v", slowest.Note, maxTTFT)
	}
}

func TestSyntheticWorkloadAndBadOptions(t *testing.T) {
	o := smallRun(50)
	o.Workload = WorkloadSynthetic
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Workload.Name != "synthetic" || rep.Summary.Requests != 50 {
		t.Errorf("workload %s, %d requests", rep.Workload.Name, rep.Summary.Requests)
	}
	for name, mod := range map[string]func(*Options){
		"missing file": func(o *Options) { o.Workload = filepath.Join(t.TempDir(), "nope.csv") },
		"bad epoch":    func(o *Options) { o.Epoch = "yesterday" },
		"rate scale":   func(o *Options) { o.RateScale = -1 },
		"tiny cache":   func(o *Options) { o.Engine.NumBlocks = 10 },
	} {
		o := smallRun(10)
		o.Workload = WorkloadSynthetic
		mod(&o)
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// -sampling keeps the preempted, slow and failed requests' traces and a
// ratio of the rest, says so, and still counts every request.
func TestSamplingPolicyFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	o := smallRun(400)
	o.Stdout, o.Stderr = &out, &errOut
	o.Sampling = "errors,preempted,ttft>1s,ratio=0.05"
	var exported int
	o.OnFinish = func(s *otelstats.RequestStats) {
		if s.Sampled {
			exported++
		}
	}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Requests != 400 {
		t.Fatalf("summary counts %d requests, want all 400", rep.Summary.Requests)
	}
	if rep.Kept[otelstats.SampledPreempted] == 0 || rep.Kept[otelstats.NotSampled] == 0 {
		t.Fatalf("kept by reason %v: want preempted ones kept and some dropped", rep.Kept)
	}
	if rep.Kept[otelstats.SampledAll] != 0 {
		t.Fatalf("kept %v: the policy was not applied", rep.Kept)
	}
	if !strings.Contains(out.String(), "traces kept by the sampling policy: ") {
		t.Errorf("output does not say what was kept:\n%s", out.String())
	}
	if exported >= 400 || exported == 0 {
		t.Errorf("%d of 400 traces kept", exported)
	}
	if _, err := Run(context.Background(), Options{Sampling: "ratio=7"}); err == nil {
		t.Error("a bad policy was accepted")
	}
}

// Every serving feature at once, in-process: the client's table counts
// the router's requests, the picker joins each request's three parts, and
// the summary says what each feature did.
func TestServingModes(t *testing.T) {
	var out bytes.Buffer
	o := smallRun(300)
	o.Stdout = &out
	o.PD, o.SpecDecode, o.Multimodal = true, true, 0.3
	o.Adapters = "sql-lora=0.3,chat-lora=0.2"
	o.Engine.PD.FailureRate = 0.1
	o.Engine.AbortRate = 0.05
	roles := map[string]int{}
	o.OnFinish = func(s *otelstats.RequestStats) { roles[s.PDRole]++ }
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Requests != 300 || roles[""] != 300 || roles[otelstats.PDRolePrefill] != 300 || roles[otelstats.PDRoleDecode] == 0 {
		t.Fatalf("summary of %d requests; finished by role %v", rep.Summary.Requests, roles)
	}
	if len(rep.Result.Instances) != 2 || rep.Result.Rejections != 0 {
		t.Fatalf("%d instances, %d rejections", len(rep.Result.Instances), rep.Result.Rejections)
	}
	var titles []string
	for _, w := range rep.Waterfalls {
		titles = append(titles, w.Title)
		if !strings.HasPrefix(w.Rows[0].Label, "chat llama-3-8b [router") || w.Rows[1].Depth != 1 {
			t.Errorf("%s: rows start %q, %+v", w.Title, w.Rows[0].Label, w.Rows[1])
		}
	}
	if !slices.Contains(titles, "a failed KV transfer, recomputed on the decode instance") || !slices.Contains(titles, "slowest TTFT") {
		t.Errorf("waterfalls %v", titles)
	}
	for _, want := range []string{"KV transfers", "speculative decoding: k=4", "LoRA adapters (at most 4 in a batch):", "multimodal: "} {
		if !strings.Contains(rep.Serving, want) || !strings.Contains(out.String(), want) {
			t.Errorf("the serving summary lacks %q:\n%s", want, rep.Serving)
		}
	}
	o.Sampling = "errors"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "-sampling cannot be used with -pd") {
		t.Errorf("-sampling with -pd: %v", err)
	}
}
