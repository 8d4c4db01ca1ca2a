package otelconf

import "testing"

// TestPerSignalEndpointOverridesCheck: a per-signal endpoint replaces the
// general one, so only it is checked for that signal: traces over
// OTLP/HTTP to their own URL beside a general gRPC target the metrics use
// (collector:4317) start, as the exporters take them; Setup refused the
// general target for traces, which never use it. The general one is still
// checked for the signal it serves.
func TestPerSignalEndpointOverridesCheck(t *testing.T) {
	cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://jaeger:4318/v1/traces")
	sel, err := selectSignal("traces", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := sel.target(); got != "http://jaeger:4318/v1/traces (otlp/http/protobuf)" {
		t.Errorf("traces target %q", got)
	}
	if sel, err = selectSignal("metrics", ""); err != nil || sel.target() != "collector:4317 (otlp/grpc)" {
		t.Errorf("metrics: %q, %v", sel.target(), err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
	if _, err := selectSignal("metrics", ""); err == nil {
		t.Error("metrics over OTLP/HTTP to the general collector:4317: no error")
	}
}
