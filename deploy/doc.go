// Package deploy holds no code. Its directory carries the configuration of
// the demo stack started by docker-compose.yml at the repository root: the
// OpenTelemetry Collector, Prometheus (with recording rules that give vLLM's
// metric names) and Grafana (datasources and the llmtrace dashboard). Its
// tests keep the dashboard's PromQL in step with the metric names the
// OpenTelemetry Prometheus exporter produces for the names and units in
// package attributes, and check the Prometheus configuration and its rules
// with promtool when it is installed.
//
// The compose file, the collector configuration, the recording rules and
// both dashboards against a real Prometheus scraping the demo are checked by
// the separate module in e2e/deploycheck, which can afford a YAML parser,
// compose-go and real backends.
package deploy
