package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The example builds against the repository as another module would and
// runs: each embedded part finishes its request.
func TestEmbed(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"} {
		t.Setenv(k, "")
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"server (middleware)  chat toy-llm: stop, 2 output tokens, ttft valid true",
		"gateway (proxy)      chat toy-llm: stop, 2 output tokens, ttft valid true",
		"engine (collector)   chat toy-llm: stop, 2 output tokens, ttft valid true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
