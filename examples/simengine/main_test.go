package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
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
			"chat llama-3-8b [router", "chat llama-3-8b [prefill", "chat llama-3-8b [decode", "llm.kv_transfer (", "llm.queue (kv_ready)",
			"a failed KV transfer, recomputed on the decode instance", "≈ KV transfer", "HTML report: " + page,
		}},
		{"spec", []string{"-spec-decode", "-spec-k", "3", "-spec-accept", "0.9,0.5"}, []string{
			"speculative decoding: 3 draft tokens a step, accepted with probability 0.9,0.5 by position",
			"speculative decoding: k=3, acceptance model 0.9,0.5", "draft tokens accepted (acceptance rate", "accepted per draft position (simulator): 0: ",
			"draft accepted)",
		}},
		{"lora", []string{"-lora", "sql-lora=0.5,chat-lora=0.2", "-max-loras", "1"}, []string{
			"LoRA adapters: sql-lora=0.5,chat-lora=0.2, at most 1 in a batch", "LoRA adapters (at most 1 in a batch):",
			"(base model)", "sql-lora ", "chat-lora ", "; adapter ", "[lora chat-lora]",
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

// TestREADMEModernServing checks the README's "Modern serving" section
// against the built binaries: every update log in it replays through
// llmtrace replay into the values the text gives, and every demo command in
// it runs and prints the waterfalls pasted below it, line for line (but the
// trace ids), when the conversation trace they came from is here.
func TestREADMEModernServing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	from := strings.Index(s, "\n## Modern serving\n")
	if from < 0 {
		t.Fatal("the README has no Modern serving section")
	}
	sec := s[from+1:]
	sec = sec[:strings.Index(sec, "\n## ")]
	dir := t.TempDir()
	demo, llmtrace := filepath.Join(dir, "simengine"), filepath.Join(dir, "llmtrace")
	for bin, pkg := range map[string]string{demo: ".", llmtrace: "../../cmd/llmtrace"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}

	// The update logs, and what the text says replay derives from them.
	want := map[string]map[string]any{
		"req-478/decode":  {"kv_transfer_duration_s": 0.0071, "num_remote_tokens": 628.0, "kv_transfer_bytes": 82313216.0, "queue_duration_s": 0.002},
		"req-478/prefill": {"finish_reason": "remote_decode", "num_output_tokens": 1.0},
		"s1":              {"num_draft_tokens": 12.0, "num_accepted_tokens": 6.0, "num_spec_steps": 3.0, "spec_acceptance_rate": 0.5, "spec_mean_acceptance_length": 3.0, "num_output_tokens": 10.0},
		"l1":              {"lora_adapter": "chat-lora", "model": "llama-3-8b"},
		"m1":              {"encode_duration_s": 0.0078, "num_encoder_runs": 2.0},
	}
	logs := fenced(sec, "json")
	if len(logs) != 5 {
		t.Fatalf("%d update logs in the section, want 5", len(logs))
	}
	for i, l := range logs {
		f := filepath.Join(dir, "log.jsonl")
		if err := os.WriteFile(f, []byte(strings.Join(l, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(llmtrace, "replay", f).Output()
		if err != nil {
			t.Fatalf("log %d: llmtrace replay: %v", i, err)
		}
		var st map[string]any
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("log %d: %v: %s", i, err, out)
		}
		key := st["request_id"].(string)
		if role, ok := st["pd_role"].(string); ok {
			key += "/" + role
		}
		w, ok := want[key]
		if !ok {
			t.Fatalf("log %d: request %s is not in the test's table", i, key)
		}
		delete(want, key)
		for k, v := range w {
			if st[k] != v {
				t.Errorf("log %d (%s): %s = %v, the README says %v", i, key, k, st[k], v)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("logs the README no longer has: %v", want)
	}

	// The demo commands, and the waterfalls pasted from them.
	cmds := regexp.MustCompile("`go run \\./examples/simengine([^`]*)`").FindAllStringSubmatch(sec, -1)
	if len(cmds) < 5 {
		t.Fatalf("%d demo commands in the section", len(cmds))
	}
	var all strings.Builder
	for _, c := range cmds {
		cmd := exec.Command(demo, append(strings.Fields(c[1]), "-quiet")...)
		cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("simengine%s: %v\n%s", c[1], err, out)
		}
		all.Write(out)
	}
	if workload.FindDefault() == "" {
		t.Logf("the conversation trace is not here; the pasted waterfalls are not compared")
		return
	}
	got := all.String()
	falls := fenced(sec, "")
	if len(falls) != 5 {
		t.Fatalf("%d waterfalls in the section, want 5", len(falls))
	}
	for _, f := range falls {
		for _, line := range f {
			if !strings.Contains(got, line) {
				t.Errorf("the demo no longer prints the README's line\n%s", line)
			}
		}
	}
}

// fenced returns the lines of every fenced block of text whose info string
// is info ("" for a plain block).
func fenced(text, info string) [][]string {
	var out [][]string
	var cur []string
	in, keep := false, false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			if in {
				if keep {
					out = append(out, cur)
				}
				in, cur = false, nil
				continue
			}
			in, keep = true, strings.TrimPrefix(line, "```") == info
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return out
}
