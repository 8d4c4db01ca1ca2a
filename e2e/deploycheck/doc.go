// Package deploycheck validates the demo stack (docker-compose.yml and the
// configs under deploy/) with tools the library's own module should not
// depend on: compose-go for the compose file, a YAML parser for the
// collector, Prometheus and Grafana configs, a real OpenTelemetry Collector
// built with ocb from otelcol/builder-config.yaml, and real Prometheus and
// Jaeger servers.
//
// Its dashboard tests run the demo (examples/simengine) with failures,
// aborts and preemptions, resolve the Grafana dashboards' template variables
// as Grafana does, and require data from every panel query: the bundled
// llmtrace dashboard on a direct scrape and through the collector, and
// vLLM's own dashboards through deploy's vLLM recording rules.
//
// It lives in the e2e module, so none of this reaches the library's go.mod.
package deploycheck
