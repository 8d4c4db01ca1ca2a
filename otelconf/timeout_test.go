package otelconf

import (
	"context"
	"testing"
	"time"
)

// TestOTLPTimeout: OTEL_EXPORTER_OTLP_TIMEOUT and its per-signal variant
// are the specification's Timeout type: a negative value is warned about
// and ignored (the general variable, else the 10 s default, applies), and
// a value past time.Duration is the longest one. The Go exporters took a
// negative value as no timeout at all, without a word, so one stray minus
// sign let every export to a hung backend wait forever.
func TestOTLPTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		want   time.Duration
		set    bool
		warned bool
	}{
		{"unset", nil, 0, false, false},
		{"general", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"}, 2500 * time.Millisecond, true, false},
		{"per signal wins", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "300"}, 300 * time.Millisecond, true, false},
		{"zero is none", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "0"}, 0, true, false},
		{"negative: the default", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "-1"}, 10 * time.Second, true, true},
		{"negative per signal: the general", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-5"}, 2500 * time.Millisecond, true, true},
		{"not a number: the default", []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s"}, 10 * time.Second, true, true},
		{"past Duration", []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "9300000000000"}, time.Duration(1<<63 - 1), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, errs := selectTraces(t, tc.env...)
			if sel.timeout != tc.want || sel.timeoutSet != tc.set {
				t.Errorf("timeout %v (set %v); want %v (set %v)", sel.timeout, sel.timeoutSet, tc.want, tc.set)
			}
			if warned := len(errs.all()) > 0; warned != tc.warned {
				t.Errorf("warned %v: %v", warned, errs.all())
			}
		})
	}
}

// TestNegativeTimeoutBoundsExport: with a negative per-signal timeout
// beside a general one of 200 ms, an export to a backend that never
// answers gives up after the general one; it used to wait without bound
// (the batch processor's own bound is off here). gRPC only: the Go
// OTLP/HTTP exporter bounds each attempt by the timeout but retries a
// timed-out one for up to a minute, under the batch processor's bound.
func TestNegativeTimeoutBoundsExport(t *testing.T) {
	ep := silentListener(t)
	cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", ep, "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
		"OTEL_METRICS_EXPORTER", "none", "OTEL_BSP_EXPORT_TIMEOUT", "0",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "200", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1")
	_ = captureErrors(t)
	p := setup(t, Config{})
	recordOne(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Batch.ForceFlush(ctx); err != nil {
		t.Fatalf("the export to a silent backend was not bounded by OTEL_EXPORTER_OTLP_TIMEOUT=200: %v", err)
	}
}

// selectTraces is the traces signal's selection under env (variable,
// value, …) beside an OTLP endpoint, and the errors it reported.
func selectTraces(t *testing.T, env ...string) (selection, *errorLog) {
	t.Helper()
	cleanEnv(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"}, env...)...)
	errs := captureErrors(t)
	sel, err := selectSignal("traces", "")
	if err != nil {
		t.Fatal(err)
	}
	return sel, errs
}
