// Package deploycheck validates the demo stack (docker-compose.yml and the
// configs under deploy/) with tools the library's own module should not
// depend on: compose-go for the compose file, a YAML parser for the
// collector, Prometheus and Grafana configs, and a real OpenTelemetry
// Collector built with ocb from otelcol/builder-config.yaml.
//
// It is its own module, nested under tools/, so none of this reaches the
// library's go.mod or the tools module's.
package deploycheck
