// Package e2e holds end-to-end tests of llmtrace against real backends
// (internal/testbackend): an exporter outage with a real Jaeger stopped and
// restarted mid-run, and a backend that accepts connections but never
// answers.
package e2e
