package otelstats

// ScopeName is the instrumentation scope name of llmtrace's tracer and meter.
const ScopeName = "github.com/llmtrace/llmtrace/otelstats"

// Version is the version of llmtrace.
func Version() string { return "0.1.0" }
