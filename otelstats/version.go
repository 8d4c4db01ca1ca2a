package otelstats

import "github.com/llmtrace/llmtrace/internal/version"

// ScopeName is the instrumentation scope name of llmtrace's tracer and meter.
const ScopeName = "github.com/llmtrace/llmtrace/otelstats"

// Version is the version of llmtrace.
func Version() string { return version.Version }
