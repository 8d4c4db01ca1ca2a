// Package version holds llmtrace's version, for the instrumentation scopes
// of every package that emits telemetry.
package version

// Version is the version of llmtrace.
const Version = "0.2.0"
