// Package deploy holds no code. Its directory carries the configuration of
// the demo stack started by docker-compose.yml at the repository root: the
// OpenTelemetry Collector, Prometheus and Grafana (datasources and the
// llmtrace dashboard). Its tests keep the dashboard's PromQL in step with the
// metric names the OpenTelemetry Prometheus exporter produces for the names
// and units in package attributes, and check the Prometheus configuration
// with promtool when it is installed.
//
// The compose file itself and the collector configuration are checked by the
// separate module in e2e/deploycheck, which can afford a YAML parser and
// compose-go.
package deploy
