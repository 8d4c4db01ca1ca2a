// Package otelcol is the root of llmtrace's OpenTelemetry Collector
// module: the llmtrace processor (llmtraceprocessor), the llmtrace_metrics
// connector (llmtraceconnector) and builder-config.yaml, the ocb manifest
// of the distribution deploy/fleet runs. The module has its own go.mod so
// the collector's dependencies never reach the library's.
package otelcol
