package otelconf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSchemeWinsOverInsecure: the specification's OTLP exporter options
// say an endpoint's http:// scheme means plaintext and https:// TLS, and
// that the scheme takes precedence over OTEL_EXPORTER_OTLP_INSECURE. The Go
// exporters apply the variable after the scheme, so a leftover
// INSECURE=true would send an https:// endpoint's spans (and their
// headers, an API key among them) in clear text. The receiver here is
// plaintext: an http:// endpoint reaches it whatever INSECURE says, an
// https:// one never does.
func TestSchemeWinsOverInsecure(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, tc := range []struct {
			name      string
			scheme    string
			perSignal bool
			insecure  string
			arrive    bool
		}{
			{name: "http, INSECURE=false", scheme: "http", insecure: "false", arrive: true},
			{name: "http per signal, TRACES_INSECURE=false", scheme: "http", perSignal: true, insecure: "false", arrive: true},
			{name: "https, INSECURE=true", scheme: "https", insecure: "true"},
			{name: "https per signal, TRACES_INSECURE=true", scheme: "https", perSignal: true, insecure: "true"},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				rec := startReceiver(t, receiverOpts{http: proto != "grpc", traces: true})
				ep := tc.scheme + strings.TrimPrefix(rec.Endpoint, "http")
				epVar, insecureVar := "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_INSECURE"
				if tc.perSignal {
					epVar, insecureVar = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_INSECURE"
					if proto != "grpc" {
						ep += "/v1/traces"
					}
				}
				cleanEnv(t, epVar, ep, insecureVar, tc.insecure, "OTEL_EXPORTER_OTLP_PROTOCOL", proto,
					"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20secret",
					"OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
				_ = captureErrors(t)
				p := setup(t, Config{})
				recordOne(t, p)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = p.Shutdown(ctx)
				if got := rec.spanCount() == treeSpans; got != tc.arrive {
					t.Errorf("%d spans reached the plaintext receiver at %s with %s=%s; want them to arrive: %v (status %s)",
						rec.spanCount(), ep, insecureVar, tc.insecure, tc.arrive, p.Status())
				}
			})
		}
	}
}

// TestShutdownTwice: a program that shuts the providers down at exit and
// again in a defer (as the README's example does) gets no error from the
// second call: the MeterProvider's own second Shutdown answers "reader is
// shutdown". Later calls return the first call's result.
func TestShutdownTwice(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		c    Config
		recv bool
	}{
		{name: "nothing configured"},
		{name: "otlp", recv: true},
		{name: "prometheus handler", c: Config{Prometheus: true}},
		{name: "prometheus from the environment", env: []string{"OTEL_METRICS_EXPORTER", "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT", "0"}},
		{name: "disabled", env: []string{"OTEL_SDK_DISABLED", "true"}, c: Config{Prometheus: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if tc.recv {
				env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT", startReceiver(t, receiverOpts{traces: true, metrics: true}).Endpoint)
			}
			cleanEnv(t, env...)
			p, err := Setup(context.Background(), tc.c)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := p.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown #%d: %v", i+1, err)
				}
			}
		})
	}
}

// TestTemporalityPreference: a value of
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE the exporter does not
// know is reported (the specification: an unrecognised enum value MUST
// produce a warning); the Go exporter only logs it at a verbosity nobody
// sees. Known values, in any case, are not.
func TestTemporalityPreference(t *testing.T) {
	for _, tc := range []struct {
		value  string
		warned bool
	}{
		{"", false},
		{"cumulative", false},
		{"Delta", false},
		{"lowmemory", false},
		{"deltas", true},
	} {
		t.Run("value="+tc.value, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{http: true, metrics: true})
			cleanEnv(t, "OTEL_METRICS_EXPORTER", "otlp", "OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", tc.value)
			errs := captureErrors(t)
			p := setup(t, Config{})
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			all := errs.all()
			warned := len(all) > 0 && strings.Contains(fmt.Sprint(all), "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")
			if warned != tc.warned || !warned && len(all) > 0 {
				t.Errorf("reported %v; want a warning naming the variable: %v", all, tc.warned)
			}
		})
	}
}
