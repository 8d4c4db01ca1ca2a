package otelconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestPrometheusIPv6Host: OTEL_EXPORTER_PROMETHEUS_HOST=::1 fails the start
// with a ConfigError naming the variable and saying to write [::1]:
// autoexport joins host and port with a colon, and the listen failed with
// "too many colons", blamed on OTEL_METRICS_EXPORTER. Written [::1], the
// exit summary names the address it serves, not http://[[::1]]:….
func TestPrometheusIPv6Host(t *testing.T) {
	cleanEnv(t, "OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "::1", "OTEL_EXPORTER_PROMETHEUS_PORT", "0")
	var ce *ConfigError
	if p, err := Setup(context.Background(), Config{}); !errors.As(err, &ce) || ce.Name != "OTEL_EXPORTER_PROMETHEUS_HOST" || !strings.Contains(err.Error(), "[::1]") {
		if p != nil {
			_ = p.Shutdown(context.Background())
		}
		t.Fatalf("Setup: %v; want a ConfigError naming OTEL_EXPORTER_PROMETHEUS_HOST that says to write [::1]", err)
	}
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "[::1]")
	p, err := Setup(context.Background(), Config{})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer p.Shutdown(context.Background())
	if s := p.Status().String(); !strings.Contains(s, "served at http://[::1]:0/metrics") {
		t.Errorf("Status() = %q", s)
	}
}

// TestBlankProducers: a blank OTEL_METRICS_PRODUCERS (a template left
// empty, with a space) beside a reader autoexport builds fails the start
// naming it: autoexport reads it untrimmed, as a producer it does not know,
// and the error blamed OTEL_METRICS_EXPORTER=prometheus, a valid value.
// The OTLP reader, built here, does not read it.
func TestBlankProducers(t *testing.T) {
	for _, tc := range []struct {
		exporter string
		fails    bool
	}{{"prometheus", true}, {"console", true}, {"otlp", false}} {
		t.Run(tc.exporter, func(t *testing.T) {
			cleanEnv(t, "OTEL_METRICS_EXPORTER", tc.exporter, "OTEL_METRICS_PRODUCERS", " ",
				"OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", "0", "OTEL_EXPORTER_OTLP_TIMEOUT", "100")
			p, err := Setup(context.Background(), Config{})
			if p != nil {
				_ = p.Shutdown(context.Background())
			}
			var ce *ConfigError
			if got := errors.As(err, &ce) && ce.Name == "OTEL_METRICS_PRODUCERS"; got != tc.fails || !tc.fails && err != nil {
				t.Errorf("Setup: %v; want a ConfigError naming OTEL_METRICS_PRODUCERS: %v", err, tc.fails)
			}
		})
	}
}
