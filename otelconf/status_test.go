package otelconf

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestStatusString(t *testing.T) {
	otlp := selection{signal: "traces", suffix: "TRACES", exporter: "otlp", protocol: "grpc", endpoint: "localhost:4317"}
	refused := &ExportError{Signal: "metrics", Cause: CauseRefused, Err: errors.New("x")}
	down := &ExportError{Signal: "traces", Cause: CauseUnreachable, Err: errors.New("x")}
	for _, tc := range []struct {
		name string
		s    Status
		want string
	}{
		{"off", Status{}, "traces: not exported; metrics: not exported"},
		{"disabled", Status{Disabled: true}, "telemetry: disabled (OTEL_SDK_DISABLED=true)"},
		{"all landed", Status{
			Traces:  SignalStatus{Exporter: "otlp", Target: otlp.target(), Produced: 12, Exported: 12, counted: true},
			Metrics: SignalStatus{Exporter: "otlp", Target: otlp.target(), Exports: 3, counted: true},
		}, "traces: 12 of 12 spans exported to localhost:4317 (otlp/grpc); metrics: 3 of 3 exports to localhost:4317 (otlp/grpc)"},
		{"metrics refused", Status{
			Traces:  SignalStatus{Exporter: "otlp", Target: "t", Produced: 5, Exported: 5, counted: true},
			Metrics: SignalStatus{Exporter: "otlp", Target: "t", Exports: 4, Failures: 4, Err: refused, counted: true},
		}, "traces: 5 of 5 spans exported to t; metrics: 0 of 4 exports to t, refused by the backend"},
		{"backend down", Status{
			Traces:  SignalStatus{Exporter: "otlp", Target: "t", Produced: 5, Dropped: 5, Exports: 1, Failures: 1, Err: down, counted: true},
			Metrics: SignalStatus{Exporter: "prometheus", Target: "http://localhost:9464/metrics (prometheus)"},
		}, "traces: 0 of 5 spans exported to t, 5 dropped, last failure: unreachable; metrics: served at http://localhost:9464/metrics (prometheus)"},
		{"console", Status{Metrics: SignalStatus{Exporter: "console", Target: "stdout (console)"}}, "traces: not exported; metrics: to stdout (console)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestExportStateRuns: one report per run of failures; a success ends the
// run; the latest failure is kept until a success.
func TestExportStateRuns(t *testing.T) {
	s := &exportState{sel: selection{signal: "traces", exporter: "otlp", protocol: "grpc", endpoint: "e"}, counted: true}
	fail := errors.New("connection refused")
	var firsts []bool
	for _, err := range []error{fail, fail, nil, fail, nil} {
		_, first := s.done(err)
		firsts = append(firsts, first)
	}
	if want := []bool{true, false, false, true, false}; !equal(firsts, want) {
		t.Errorf("first of run: %v, want %v", firsts, want)
	}
	st := s.status()
	if st.Exports != 5 || st.Failures != 3 || st.Err != nil {
		t.Errorf("status %+v", st)
	}
	s.done(fail)
	if st := s.status(); st.Err == nil || st.Refused() {
		t.Errorf("status %+v", st)
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Summary is the commands' exit line: nothing when nothing is exported,
// the spans that reached the backend when traces are.
func TestSummary(t *testing.T) {
	cleanEnv(t)
	if s := setup(t, Config{}).Summary(); s != "" {
		t.Errorf("Summary without export = %q, want empty", s)
	}
	rec := startReceiver(t, receiverOpts{http: true, traces: true})
	cleanEnv(t, "OTEL_TRACES_EXPORTER", "otlp", "OTEL_METRICS_EXPORTER", "none",
		"OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	p := setup(t, Config{})
	_, s := p.TracerProvider.Tracer("t").Start(context.Background(), "x")
	s.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.Summary(); !strings.Contains(got, "1 of 1 spans exported") {
		t.Errorf("Summary = %q, want the one span exported", got)
	}
}
