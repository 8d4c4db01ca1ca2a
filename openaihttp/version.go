package openaihttp

import "github.com/llmtrace/llmtrace/otelstats"

// ScopeName is the instrumentation scope of the layer's own spans and
// metrics.
const ScopeName = "github.com/llmtrace/llmtrace/openaihttp"

// Version is the version of the instrumentation, llmtrace's.
func Version() string { return otelstats.Version() }
