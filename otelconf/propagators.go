package otelconf

import (
	"os"
	"strings"

	"go.opentelemetry.io/contrib/propagators/autoprop"
	"go.opentelemetry.io/otel/propagation"
)

// EnvPropagators names the trace context propagators, comma-separated:
// tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace, none.
const EnvPropagators = "OTEL_PROPAGATORS"

// propagatorNames lists what OTEL_PROPAGATORS may hold, for its error.
const propagatorNames = "tracecontext, baggage, b3, b3multi, jaeger, xray, ottrace or none, comma-separated"

// propagators is OTEL_PROPAGATORS's propagator, or nil when it is unset or
// blank (the caller keeps its own default: llmtrace's is W3C Trace
// Context). A name it does not know fails the start, naming it, as every
// OTEL_* value the commands cannot use does: the SDK's autoprop would log
// it and drop that propagator, and a B3 mesh's traces would silently stop
// joining.
func propagators() (propagation.TextMapPropagator, error) {
	v := strings.TrimSpace(os.Getenv(EnvPropagators))
	var names []string
	for _, n := range strings.Split(v, ",") {
		// The specification's enum values are case-insensitive;
		// autoprop's registry is lower-case.
		if n = strings.ToLower(strings.TrimSpace(n)); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	p, err := autoprop.TextMapPropagator(names...)
	if err != nil {
		return nil, &ConfigError{Name: EnvPropagators, Value: v, Reason: "want " + propagatorNames, Err: err}
	}
	return p, nil
}

// Propagator returns the trace context propagator OTEL_PROPAGATORS names,
// or nil when it is unset: give it to openaihttp (WithPropagators), which
// reads the incoming context and, in the proxy, writes the upstream's
// with it. vLLM, SGLang and TGI read W3C traceparent only: keep
// tracecontext in the list for their spans to join the trace.
func (p *Providers) Propagator() propagation.TextMapPropagator { return p.propagator }
