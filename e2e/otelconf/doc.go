// Package otelconf tests llmtrace's OTEL_* setup (the otelconf package)
// and the commands built on it against real backends (e2e/testbackend): a
// real Jaeger's OTLP receiver over gRPC and over HTTP, which takes traces
// and refuses metrics; the exporters pointed at the wrong one of its two
// ports; a real Prometheus scraping the exporter OTEL_METRICS_EXPORTER=prometheus
// serves; and the built simengine demo and `llmtrace load` binaries, run as
// the README runs them.
package otelconf
