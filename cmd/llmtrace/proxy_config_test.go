package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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

// TestProxyZeroIdleTimeoutIsNone: -idle-timeout 0 keeps an idle keep-alive
// connection without bound, as -read-timeout 0 is none: net/http reads a
// zero IdleTimeout as ReadTimeout's, so the connection was closed after
// -read-timeout (here 150 ms; 5 min by default).
func TestProxyZeroIdleTimeoutIsNone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr lockedBuffer
	addr, done := startProxy(ctx, t, &stderr, "-upstream", "http://127.0.0.1:1", "-models", "m", "-stats-log", "0",
		"-read-timeout", "150ms", "-idle-timeout", "0")
	defer func() { cancel(); <-done }()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for i := range 2 {
		if i == 1 {
			time.Sleep(500 * time.Millisecond) // idle, past -read-timeout
		}
		if _, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on the kept connection: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// TestCollectConfigErrorIsUsage: collect, like the proxy, ends with the
// usage status, 2, naming the variable, for an OTEL_* value it cannot use.
func TestCollectConfigErrorIsUsage(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "xray")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	var stderr bytes.Buffer
	code := collect(context.Background(), []string{"-listen", "-", "-stats-log", "0"}, strings.NewReader(""), io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "OTEL_TRACES_SAMPLER") {
		t.Errorf("exit %d, stderr %q; want 2 and the variable named", code, stderr.String())
	}
}
