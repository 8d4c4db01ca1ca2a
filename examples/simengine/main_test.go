package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The serving-feature flags, through the built binary: each turns its
// feature on (the header, the summary and the waterfalls say so), and bad
// values fail the command with a message.
func TestServingFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the demo")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "simengine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"-requests", "150", "-kv-blocks", "1024", "-quiet"}, args...)...)
		// No OTLP export from the environment.
		cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	page := filepath.Join(dir, "pd.html")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"pd", []string{"-pd", "-pd-link-gbps", "25", "-pd-failure-rate", "0.2", "-html", page}, []string{
			"P/D: a router sends each request to prefill-0 (max_tokens 1), then to decode-0, which loads its KV cache over a 25 Gb/s link",
			"P/D: router → prefill-0 → decode-0 over a 25 Gb/s link; 150 KV transfers,", "failed (recomputed on decode-0)",
			"router: send to P → P's response", "D: KV transfer", "[sim +0:00:30 decode-0] Avg prompt throughput",
			"chat llama-3-8b [router]", "chat llama-3-8b [prefill]", "chat llama-3-8b [decode]", "llm.kv_transfer (", "llm.queue (kv_ready)",
			"a failed KV transfer, recomputed on the decode instance", "≈ KV transfer", "HTML report: " + page,
		}},
		{"spec", []string{"-spec-decode", "-spec-k", "3", "-spec-accept", "0.9,0.5"}, []string{
			"speculative decoding: 3 draft tokens a step, accepted with probability 0.9,0.5 by position",
			"speculative decoding: k=3, acceptance model 0.9,0.5", "draft tokens accepted (acceptance rate", "accepted per draft position (simulator): 0: ",
			"draft accepted)",
		}},
		{"lora", []string{"-lora", "sql-lora=0.5,chat-lora=0.2", "-max-loras", "1"}, []string{
			"LoRA adapters: sql-lora=0.5,chat-lora=0.2, at most 1 in a batch", "LoRA adapters (at most 1 in a batch):",
			"(base model)", "sql-lora ", "chat-lora ", "; adapter ",
		}},
		{"multimodal", []string{"-multimodal", "0.5", "-max-images", "3"}, []string{
			"multimodal: 50% of requests carry 1–3 images of 576 tokens", "images of 576 tokens;", "encoder runs in",
			"runs before prefill", "llm.encode (", "◆ encode",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
	if b, err := os.ReadFile(page); err != nil || strings.Count(string(b), `data-chart="load"`) != 2 {
		t.Errorf("the -pd page has no load chart per instance (%v)", err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"-pd", "-sampling", "errors"}, "-sampling cannot be used with -pd"},
		{[]string{"-pd", "-pd-failure-rate", "1.5"}, "failure rate 1.5"},
		{[]string{"-pd", "-pd-link-gbps", "0"}, "bandwidth 0 Gb/s"},
		{[]string{"-spec-decode", "-spec-k", "0"}, "draft length 0"},
		{[]string{"-spec-decode", "-spec-accept", "1.2"}, "acceptance model"},
		{[]string{"-lora", "a=2"}, "adapter mix"},
		{[]string{"-lora", "a=0.1", "-max-loras", "0"}, "max LoRAs"},
		{[]string{"-multimodal", "1.5"}, "multimodal rate"},
		{[]string{"-multimodal", "0.5", "-max-images", "0"}, "images per request"},
	} {
		out, err := run(bad.args...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(out, bad.want) {
			t.Errorf("%v: exit %v, output %q; want exit 1 saying %q", bad.args, err, lastLine(out), bad.want)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
