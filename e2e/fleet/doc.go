// Package fleet tests deploy/fleet for real: the llmtrace Collector
// distribution (otelcol/builder-config.yaml) built with ocb, the two-tier
// recipe run on loopback with real Jaeger and Prometheus, engines under
// load. It is test-only; see TestFleetLive.
package fleet
