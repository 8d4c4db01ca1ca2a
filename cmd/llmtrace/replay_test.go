package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// rejectedByReason collects llm.rejected_updates from rd by reason.
func rejectedByReason(t *testing.T, rd sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != attributes.MetricRejectedUpdates {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(attributes.RejectionReason))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// TestReplayOverlongLine: a log line over 1 MiB is rejected as too_long
// — said on stderr and counted in llm.rejected_updates as every other
// rejection is — and the lines after it are read on, numbered right.
func TestReplayOverlongLine(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	var stderr bytes.Buffer
	r := &replayRun{stderr: &stderr, out: bufio.NewWriter(io.Discard)}
	tr, err := otelstats.NewTracker(otelstats.WithMeterProvider(mp), otelstats.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelstats.WithOnReject(func(e *otelstats.RejectError) { r.reject("%v", e) }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	log := `{"request_id":"a","type":"ARRIVED","ts":1700000000,"model":"m","pad":"` + strings.Repeat("x", maxLine) + `"}` + "\n" +
		`{"request_id":"b","type":"ARRIVED","ts":1700000000,"model":"m"}` + "\n" +
		`{"request_id":"b","type":"QUEUED","ts":-1}` + "\n"
	if err := r.read(tr, strings.NewReader(log)); err != nil {
		t.Fatal(err)
	}
	t.Logf("stderr:\n%s", stderr.String())
	if r.rejected != 2 {
		t.Errorf("%d lines rejected, want 2", r.rejected)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "line 1: ") || !strings.Contains(lines[0], "too long") || !strings.HasPrefix(lines[1], "line 3: ") {
		t.Errorf("stderr does not name line 1 too long, then line 3")
	}
	got := rejectedByReason(t, rd)
	if got[string(otelstats.ReasonTooLong)] != 1 || got[string(otelstats.ReasonBadTimestamp)] != 1 {
		t.Errorf("llm.rejected_updates %v, want too_long 1 and bad_timestamp 1", got)
	}
}

// TestReplayStdoutFails runs the built binary with stdout on a full disk
// (/dev/full): the stats cannot be written, which exits 1, but the spans
// still reach the OTLP receiver and the summary still reaches stderr — a
// failed stdout used to end the run before the providers were shut down.
func TestReplayStdoutFails(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer full.Close()
	bin := loadBinary(t)
	srv, exports := otlpHTTPReceiver(t, 200)
	logPath := filepath.Join(t.TempDir(), "updates.jsonl")
	if err := os.WriteFile(logPath, []byte(readmeLog), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "replay", logPath)
	cmd.Env = append(cleanEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_METRICS_EXPORTER=none")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d; stderr:\n%s", code, stderr.String())
	if code != exitUnreadable {
		t.Errorf("exit %d, want %d", code, exitUnreadable)
	}
	for _, want := range []string{"no space left on device", "requests: 1 (stop=1)", "traces: "} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if exports.Load() == 0 {
		t.Error("the receiver saw no export")
	}
}

// readmeLog is the README's update log: one request, finished by both sides.
const readmeLog = `{"request_id":"r1","type":"ARRIVED","ts":1700000000.000,"model":"llama-3-8b","operation":"chat"}
{"request_id":"r1","type":"INPUT_PROCESSED","ts":1700000000.002,"num_prompt_tokens":512,"sampling_params":{"temperature":0.7,"max_tokens":256}}
{"request_id":"r1","type":"QUEUED","ts":1700000000.003}
{"request_id":"r1","type":"PREFILLING","ts":1700000000.010,"num_computed_tokens":512,"num_cached_tokens":128}
{"request_id":"r1","type":"DECODING","ts":1700000000.050,"num_new_tokens":1}
{"request_id":"r1","type":"DETOKENIZED","ts":1700000000.051,"num_new_tokens":1,"busy_time_s":0.0002}
{"request_id":"r1","type":"DECODING","ts":1700000000.070}
{"request_id":"r1","type":"DETOKENIZED","ts":1700000000.071,"num_new_tokens":1}
{"request_id":"r1","type":"FINISHED","ts":1700000000.300,"side":"engine","finish_reason":"stop"}
{"request_id":"r1","type":"FINISHED","ts":1700000000.301,"finish_reason":"stop"}
`
