// Package e2e holds end-to-end tests of llmtrace against real backends
// (e2e/testbackend): an exporter outage with a real Jaeger stopped and
// restarted mid-run, a backend that accepts connections but never
// answers, and the load generator of `llmtrace load` exporting to a real
// Jaeger at a sustainable rate and far past capacity.
package e2e
