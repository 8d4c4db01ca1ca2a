package otelconf

import (
	"context"
	"testing"
)

// TestSDKDisabledReadsNoSampler: with OTEL_SDK_DISABLED=true the SDK's
// variables are not read, so a value llmtrace cannot use there — a sampler
// the Go SDK lacks, from an environment shared with other services, or a
// bad ratio — does not fail the start, as a bad endpoint or protocol
// already did not: the specification's disabled SDK is a no-op whatever
// they say. The sampler was still read and failed the start.
func TestSDKDisabledReadsNoSampler(t *testing.T) {
	for _, env := range [][]string{
		{"OTEL_TRACES_SAMPLER", "jaeger_remote"},
		{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "10%"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"},
	} {
		t.Run(env[1], func(t *testing.T) {
			cleanEnv(t, append([]string{"OTEL_SDK_DISABLED", "true"}, env...)...)
			p, err := Setup(context.Background(), Config{})
			if err != nil {
				t.Fatalf("Setup with OTEL_SDK_DISABLED=true: %v", err)
			}
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
