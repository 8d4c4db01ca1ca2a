package otelconf

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestPropagators: OTEL_PROPAGATORS picks the propagators Setup hands out
// (Providers.Propagator); unset or blank leaves the caller's default (nil),
// and a name no propagator has fails Setup naming the variable.
func TestPropagators(t *testing.T) {
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		spanID  = "00f067aa0ba902b7"
	)
	incoming := map[string]http.Header{
		"tracecontext": {"Traceparent": {"00-" + traceID + "-" + spanID + "-01"}},
		"b3":           {"B3": {traceID + "-" + spanID + "-1"}},
		"b3multi":      {"X-B3-Traceid": {traceID}, "X-B3-Spanid": {spanID}, "X-B3-Sampled": {"1"}},
		"jaeger":       {"Uber-Trace-Id": {traceID + ":" + spanID + ":0:1"}},
	}
	for _, tc := range []struct {
		env     string
		nilProp bool     // the caller's default applies
		reads   []string // incoming headers it joins
		ignores []string // and those it does not
		wantErr bool
	}{
		{env: "", nilProp: true},
		{env: " , ", nilProp: true},
		{env: "tracecontext", reads: []string{"tracecontext"}, ignores: []string{"b3", "jaeger"}},
		{env: "b3", reads: []string{"b3"}, ignores: []string{"tracecontext"}},
		{env: "tracecontext, b3multi", reads: []string{"tracecontext", "b3multi"}, ignores: []string{"jaeger"}},
		{env: "jaeger,baggage", reads: []string{"jaeger"}, ignores: []string{"tracecontext"}},
		{env: "none", ignores: []string{"tracecontext", "b3"}},
		{env: "tracecontext,zipkin", wantErr: true},
		// Enum values are case-insensitive (the specification's
		// environment variables page).
		{env: "TraceContext, B3Multi", reads: []string{"tracecontext", "b3multi"}, ignores: []string{"jaeger"}},
		{env: "Zipkin", wantErr: true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			cleanEnv(t, EnvPropagators, tc.env)
			p, err := Setup(context.Background(), Config{})
			if tc.wantErr {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Name != EnvPropagators {
					t.Fatalf("Setup: %v, want a ConfigError naming %s", err, EnvPropagators)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			prop := p.Propagator()
			if tc.nilProp != (prop == nil) {
				t.Fatalf("Propagator() = %v, want nil: %v", prop, tc.nilProp)
			}
			joins := func(name string) bool {
				sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.HeaderCarrier(incoming[name])))
				return sc.IsValid() && sc.TraceID().String() == traceID
			}
			for _, name := range tc.reads {
				if !joins(name) {
					t.Errorf("does not read a %s header", name)
				}
			}
			for _, name := range tc.ignores {
				if joins(name) {
					t.Errorf("reads a %s header", name)
				}
			}
		})
	}
}
