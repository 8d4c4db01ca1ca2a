package otelconf

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestUnsendableHeaders: a headers entry the exporters keep but cannot
// send — a value decoded to a control character, over gRPC a key outside
// [0-9a-z-_.] or a value not printable ASCII — fails Setup with a
// ConfigError naming the variable and the key, never the value. Before,
// Setup started and every export failed on it (net/http: "invalid header
// field value", grpc-go: "contains value with non-printable ASCII
// characters"), every span lost, under an "unknown" cause. What the
// exporter can send still reaches the receiver.
func TestUnsendableHeaders(t *testing.T) {
	for _, tc := range []struct {
		proto, headers string
		refused        bool
	}{
		{"grpc", "x-key=secret%0Avalue", true},
		{"http/protobuf", "x-key=secret%0Avalue", true},
		{"http/protobuf", "x-key=secret%00", true},
		{"grpc", "x-key=secret%09tab", true},
		{"grpc", "x-key=s%C3%A9cret", true},
		{"grpc", "x-key=s\u00e9cret", true},
		{"grpc", "x!key=secret", true},
		{"grpc", "ok=1,x-key=secret%7F", true},
		{"http/protobuf", "x-key=secret%7F", true},
		{"grpc", "X-Key=Bearer%20secret", false}, // lower-cased by the exporter
		{"grpc", "x-key-bin=%FF%00secret", false},
		{"grpc", "x-key=secret%0A", false}, // trimmed by the exporter
		{"http/protobuf", "x-key=secret%09tab", false},
		{"http/protobuf", "x-key=s%C3%A9cret", false},
		{"http/protobuf", "x!key=secret", false},
	} {
		t.Run(tc.proto+"/"+tc.headers, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: tc.proto != "grpc", traces: true})
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", tc.proto,
				"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", tc.headers)
			_ = captureErrors(t)
			p, err := Setup(context.Background(), Config{})
			if tc.refused {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Name != "OTEL_EXPORTER_OTLP_TRACES_HEADERS" {
					t.Fatalf("Setup: %v; want a ConfigError naming OTEL_EXPORTER_OTLP_TRACES_HEADERS", err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the error shows the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			recordOne(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			if rec.spanCount() != treeSpans {
				t.Errorf("%d spans arrived, want %d: %s", rec.spanCount(), treeSpans, p.Status())
			}
		})
	}
}
