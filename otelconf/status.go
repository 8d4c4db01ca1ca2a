package otelconf

import (
	"errors"
	"strconv"
	"strings"
	"sync"
)

// Status is what the providers' exporters did so far, for a command's exit
// summary (Status.String) or a health endpoint. Get one from
// Providers.Status; after Providers.Shutdown returned, the span counts are
// final and Traces.Produced == Traces.Exported + Traces.Dropped.
type Status struct {
	// Disabled is true when OTEL_SDK_DISABLED=true turned export off.
	Disabled bool
	Traces   SignalStatus
	Metrics  SignalStatus
}

// SignalStatus is one signal's export.
type SignalStatus struct {
	// Exporter is "otlp", "console", "prometheus" or another name
	// autoexport knows; "" when the signal is not exported.
	Exporter string
	// Target says where, e.g. "localhost:4317 (otlp/grpc)".
	Target string
	// Exports and Failures count export calls: of every span exporter
	// and of the OTLP metric exporter (not of the readers autoexport
	// builds: console, prometheus, which is scraped).
	Exports, Failures int64
	// Err is the latest failure (an *ExportError), nil when the latest
	// export succeeded or none failed.
	Err error
	// Produced, Exported and Dropped are the batch processor's span counts
	// (traces only): spans ended, acknowledged by the backend, and lost.
	Produced, Exported, Dropped int64

	counted bool // Exports and Failures are known (readers autoexport builds are not counted)
}

// Refused reports whether the latest export failed because the backend does
// not take this signal.
func (s SignalStatus) Refused() bool {
	var e *ExportError
	return errors.As(s.Err, &e) && e.Cause == CauseRefused
}

// String is one line for an exit summary, e.g.
//
//	traces: 5400 of 5400 spans exported to localhost:4317 (otlp/grpc); metrics: 3 of 3 exports to localhost:4317 (otlp/grpc)
func (s Status) String() string {
	if s.Disabled {
		return "telemetry: disabled (OTEL_SDK_DISABLED=true)"
	}
	return "traces: " + s.Traces.traces() + "; metrics: " + s.Metrics.metrics()
}

func (s SignalStatus) traces() string {
	if s.Exporter == "" {
		return "not exported"
	}
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	var b strings.Builder
	b.WriteString(i(s.Exported) + " of " + i(s.Produced) + " spans exported to " + s.Target)
	if s.Dropped > 0 {
		b.WriteString(", " + i(s.Dropped) + " dropped")
	}
	s.writeErr(&b)
	return b.String()
}

func (s SignalStatus) metrics() string {
	switch {
	case s.Exporter == "":
		return "not exported"
	case s.Exporter == "prometheus":
		return "served at " + s.Target
	case !s.counted:
		return "to " + s.Target
	}
	var b strings.Builder
	b.WriteString(strconv.FormatInt(s.Exports-s.Failures, 10) + " of " + strconv.FormatInt(s.Exports, 10) + " exports to " + s.Target)
	s.writeErr(&b)
	return b.String()
}

func (s SignalStatus) writeErr(b *strings.Builder) {
	var e *ExportError
	if !errors.As(s.Err, &e) {
		return
	}
	if e.Cause == CauseRefused {
		b.WriteString(", refused by the backend")
	} else {
		b.WriteString(", last failure: " + e.Cause.String())
	}
}

// exportState counts one exporter's calls and classifies its failures. It
// is safe for concurrent use.
type exportState struct {
	sel     selection
	counted bool // done sees every export

	mu                sync.Mutex
	exports, failures int64
	failing           bool
	partialRun        bool // the latest exports were OTLP partial successes
	last              error
}

// done records an export's outcome. For a failure it returns the
// classified error, and first when it starts a run of failures (the one to
// report: a backend that is down must not flood the error handler).
func (s *exportState) done(err error) (xe *ExportError, first bool) {
	if err != nil {
		xe = &ExportError{Signal: s.sel.signal, Target: s.sel.target(), Cause: classify(err), Err: err, envSuffix: s.sel.suffix, protocol: s.sel.protocol}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports++
	if err == nil {
		s.failing, s.partialRun, s.last = false, false, nil
		return nil, false
	}
	s.failures++
	first = !s.failing
	s.failing, s.last = true, xe
	return xe, first
}

// partial records an export answered with OTLP's partial success: a
// success, whose rejections or warning are reported when first reports
// that it starts a run of such answers.
func (s *exportState) partial() (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exports++
	s.failing, s.last = false, nil
	first = !s.partialRun
	s.partialRun = true
	return first
}

func (s *exportState) status() SignalStatus {
	if s == nil {
		return SignalStatus{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return SignalStatus{Exporter: s.sel.exporter, Target: s.sel.target(), Exports: s.exports, Failures: s.failures, Err: s.last, counted: s.counted}
}

// Summary is the exit line of a command: Status's, when anything was
// exported (traces or metrics), else "".
func (p *Providers) Summary() string {
	st := p.Status()
	if !st.Disabled && st.Traces.Exporter == "" && st.Metrics.Exporter == "" {
		return ""
	}
	return st.String()
}
