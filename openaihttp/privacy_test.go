package openaihttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// The secrets end in a non-hex letter: a fragment of hex digits alone
// turned up in random trace and span ids about once in a hundred runs.
const (
	secretPrompt     = "SECRET-PROMPT-91bz"
	secretCompletion = "SECRET-COMPLETION-7f3z"
)

// exported is everything a run emitted, as text: every span's name,
// attributes, events and status; every metric with its attributes and
// exemplars; every log line; every RequestStats.
func (x *h) exported(logs *bytes.Buffer) string {
	var b strings.Builder
	for _, s := range x.rec.Ended() {
		fmt.Fprintf(&b, "%s %v %v %v\n", s.Name(), s.Attributes(), s.Events(), s.Status())
	}
	var rm metricdata.ResourceMetrics
	if err := x.reader.Collect(context.Background(), &rm); err != nil {
		x.t.Fatal(err)
	}
	fmt.Fprintf(&b, "%+v\n", rm)
	b.WriteString(logs.String())
	x.mu.Lock()
	for i := range x.stats {
		b.Write(x.stats[i].AppendJSON(nil))
	}
	x.mu.Unlock()
	return b.String()
}

func runPrivacyRequests(t *testing.T, opts ...otelstats.Option) (*h, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	x := newH(t, append([]otelstats.Option{otelstats.WithStatsLog(logger, time.Nanosecond)}, opts...)...)
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + secretPrompt + `"}]}`
	fs := &fakeServer{events: chatStream([]string{"SECRET-", "COMPLETION-", "7f3z"}, "stop", `{"prompt_tokens":9,"completion_tokens":3}`)}
	srv, cl := serve(t, x.handler(fs, x.tr))
	post(t, cl, srv.URL+"/v1/chat/completions", body)
	x.wait(1)
	fs2 := &fakeServer{json: `{"choices":[{"message":{"role":"assistant","content":"` + secretCompletion + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3}}`}
	srv2, cl2 := serve(t, x.handler(fs2, x.tr))
	post(t, cl2, srv2.URL+"/v1/chat/completions", strings.Replace(body, `"stream":true,`, "", 1))
	x.wait(1)
	// Two scheduler steps: the first starts the stats interval, the
	// second logs a line.
	x.tr.RecordSchedulerStats(time.Now().Add(time.Hour), otelstats.SchedulerStats{Running: 1})
	x.tr.RecordSchedulerStats(time.Now().Add(2*time.Hour), otelstats.SchedulerStats{Running: 1})
	return x, &logs
}

// SPEC §6: by default nothing of a prompt or a completion leaves the
// process, in spans, events, attributes, metrics, logs or stats.
func TestPrivacyNothingCapturedByDefault(t *testing.T) {
	// The library itself reads no environment (otelconf does): even the
	// opt-in variable changes nothing without the option.
	t.Setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
	x, logs := runPrivacyRequests(t)
	out := x.exported(logs)
	if !strings.Contains(out, "chat m") || !strings.Contains(logs.String(), "throughput") {
		t.Fatalf("the scan saw no spans or no log lines:\n%s", out)
	}
	for _, secret := range []string{secretPrompt, secretCompletion, "91bz", "7f3z"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q was exported without opting in", secret)
		}
	}
}

// Opting in records prompt and completion on the root span, redacted by
// the user's hook and cut at the size cap.
func TestPrivacyOptInCaptureCapsAndRedacts(t *testing.T) {
	cases := []struct {
		name string
		opt  otelstats.Option
		max  int
	}{
		{"defaults (what otelconf sets from the environment)", otelstats.WithContentCapture(&otelstats.ContentCapture{}), otelstats.DefaultContentMax},
		{"option with cap and redaction", otelstats.WithContentCapture(&otelstats.ContentCapture{
			MaxBytes: 120, Redact: func(s string) string { return strings.ReplaceAll(s, "7f3z", "[redacted]") },
		}), 120},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []otelstats.Option
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			x, _ := runPrivacyRequests(t, opts...)
			roots := 0
			for _, s := range x.rec.Ended() {
				if s.Name() != "chat m" {
					continue
				}
				roots++
				var in, out string
				for _, kv := range s.Attributes() {
					switch kv.Key {
					case attributes.InputMessages:
						in = kv.Value.AsString()
					case attributes.OutputMessages:
						out = kv.Value.AsString()
					}
				}
				ins, outs := messageTexts(t, in), messageTexts(t, out)
				if len(ins) != 1 || ins[0] != secretPrompt {
					t.Errorf("input %q, want the prompt (the cap's cuts: otelstats' TestMessagesCap)", in)
				}
				if len(in) > tc.max || len(out) > tc.max {
					t.Errorf("input %d / output %d bytes, cap %d", len(in), len(out), tc.max)
				}
				if tc.max == otelstats.DefaultContentMax && (len(outs) != 1 || outs[0] != secretCompletion) {
					t.Errorf("output %q, want %q", out, secretCompletion)
				}
				if tc.max != otelstats.DefaultContentMax && (len(outs) != 1 || outs[0] != "SECRET-COMPLETION-[redacted]") {
					t.Errorf("output %q, want the redacted completion", out)
				}
			}
			if roots != 2 {
				t.Fatalf("%d root spans, want 2", roots)
			}
		})
	}
}

// messageTexts reads the GenAI conventions' messages in s (the JSON must
// parse, every message must have its role and parts) and returns their
// parts' contents in order.
func messageTexts(t *testing.T, s string) []string {
	t.Helper()
	if s == "" {
		return nil
	}
	var msgs []struct {
		Role  *string `json:"role"`
		Parts []struct {
			Content string `json:"content"`
		} `json:"parts"`
	}
	if err := json.Unmarshal([]byte(s), &msgs); err != nil {
		t.Fatalf("not the conventions' messages: %v: %q", err, s)
	}
	var texts []string
	for _, m := range msgs {
		if m.Role == nil || m.Parts == nil {
			t.Fatalf("a message without role or parts: %q", s)
		}
		for _, p := range m.Parts {
			texts = append(texts, p.Content)
		}
	}
	return texts
}
