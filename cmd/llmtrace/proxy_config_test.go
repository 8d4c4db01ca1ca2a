package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestProxyConfigErrorIsUsage: an OTEL_* value the proxy cannot use (a
// sampler the Go SDK lacks, an unknown protocol) ends it at start with the
// usage status, 2, naming the variable, as otelconf.ConfigError asks and
// load does; it exited 1, the status of a failure at run time (a listen
// address taken), so a supervisor could not tell a configuration to fix
// from a fault to retry.
func TestProxyConfigErrorIsUsage(t *testing.T) {
	for _, env := range [][2]string{
		{"OTEL_TRACES_SAMPLER", "xray"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "thrift"},
	} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			var stderr bytes.Buffer
			args := []string{"-listen", "127.0.0.1:0", "-upstream", "http://127.0.0.1:1", "-models", "m", "-stats-log", "0"}
			code := runProxy(context.Background(), args, io.Discard, &stderr, func(string) { t.Error("serving") })
			if code != 2 || !strings.Contains(stderr.String(), env[0]) {
				t.Errorf("exit %d, stderr %q; want 2 and the variable named", code, stderr.String())
			}
		})
	}
}
