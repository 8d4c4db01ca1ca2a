package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// clearOTLPEnv empties the variables load reads (restored when t ends,
// which also undoes what -endpoint sets).
func clearOTLPEnv(t *testing.T) {
	for _, k := range []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT",
		"LLMTRACE_SAMPLING", "LLMTRACE_DETAIL", "OTEL_TRACES_SAMPLER",
	} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
}

// summaryLines parses load's stdout: each "llmtrace-load k=v ..." line as a
// map, in order.
func summaryLines(t *testing.T, out string) []map[string]string {
	t.Helper()
	var lines []map[string]string
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "llmtrace-load" {
			t.Errorf("unexpected stdout line %q", l)
			continue
		}
		m := map[string]string{}
		for _, kv := range f[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok {
				m[k] = v
			} else {
				m[kv] = ""
			}
		}
		lines = append(lines, m)
	}
	return lines
}

func num(t *testing.T, m map[string]string, k string) int64 {
	t.Helper()
	v, ok := m[k]
	if !ok {
		t.Fatalf("no %s in %v", k, m)
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", k, v, err)
	}
	return int64(n)
}

func TestLoadUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", []string{"-duration", "100ms"}, "no traces endpoint"},
		{"bad endpoint", []string{"-endpoint", "nowhere"}, "want host:port"},
		// A port out of range: every span dropped at the dial.
		{"endpoint port out of range", []string{"-endpoint", "127.0.0.1:99999", "-duration", "100ms"}, "the port is out of range"},
		{"endpoint URL port out of range", []string{"-endpoint", "http://127.0.0.1:70000", "-duration", "100ms"}, "the port is out of range"},
		{"zero duration", []string{"-endpoint", "127.0.0.1:1", "-duration", "0"}, "-duration"},
		{"negative rate", []string{"-endpoint", "127.0.0.1:1", "-rate", "-5"}, "-rate"},
		{"NaN rate", []string{"-endpoint", "127.0.0.1:1", "-rate", "NaN"}, "-rate"},
		{"infinite rate", []string{"-endpoint", "127.0.0.1:1", "-rate", "+Inf"}, "-rate"},
		{"negative max-waiting", []string{"-endpoint", "127.0.0.1:1", "-max-waiting", "-1"}, "-max-waiting"},
		{"negative progress", []string{"-endpoint", "127.0.0.1:1", "-progress", "-1s"}, "-progress"},
		{"extra argument", []string{"-endpoint", "127.0.0.1:1", "more"}, "unexpected"},
		// Past the tracker's cap the batch measures evictions, and with
		// -rate 0 load held it all: 200,000,000 died out of memory.
		{"in-flight past the tracker's cap", []string{"-endpoint", "127.0.0.1:1", "-in-flight", "1048577", "-rate", "0"}, "-in-flight is at most 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTLPEnv(t)
			var stdout, stderr bytes.Buffer
			if code := load(context.Background(), tc.args, nil, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// otlpHTTPReceiver answers every OTLP/HTTP export with status (200: an
// empty, successful response) and counts the exports.
func otlpHTTPReceiver(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	var exports atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		exports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, &exports
}

// TestLoadReports runs short levels against an in-process OTLP/HTTP
// receiver that accepts or refuses every export, and against a gRPC
// endpoint that never answers: the summary accounts for every span.
func TestLoadReports(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int  // the HTTP receiver's answer; 0: a gRPC endpoint that never answers
		findMax    bool // run -find-max
		wantExport bool
	}{
		{name: "accepting receiver", status: http.StatusOK, wantExport: true},
		{name: "refusing receiver", status: http.StatusBadRequest},
		{name: "silent gRPC endpoint"},
		{name: "find-max", status: http.StatusOK, findMax: true, wantExport: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearOTLPEnv(t)
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
			args := []string{"-rate", "400", "-duration", "300ms", "-progress", "0", "-in-flight", "32"}
			var exports *atomic.Int64
			if tc.status != 0 {
				var srv *httptest.Server
				srv, exports = otlpHTTPReceiver(t, tc.status)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
			} else {
				silent := startSilent(t)
				t.Setenv("OTEL_BSP_EXPORT_TIMEOUT", "200")
				args = append(args, "-endpoint", silent.Addr().String())
			}
			if tc.findMax {
				args = append(args, "-find-max", "-levels", "2")
			}
			var stdout, stderr bytes.Buffer
			if code := load(context.Background(), args, nil, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
			}
			t.Logf("stdout:\n%s", stdout.String())
			lines := summaryLines(t, stdout.String())
			levels := 1
			if tc.findMax {
				levels = 2
			}
			if len(lines) != levels+1+btoi(tc.findMax) {
				t.Fatalf("%d summary lines, want %d levels, a total and (find-max) a max line", len(lines), levels)
			}
			var produced, exported, dropped int64
			for _, m := range lines[:levels] {
				p, e, d := num(t, m, "produced"), num(t, m, "exported"), num(t, m, "dropped")
				if p != e+d {
					t.Errorf("level %s: produced %d != exported %d + dropped %d", m["rate"], p, e, d)
				}
				if done := num(t, m, "completed"); p != 6*done || done == 0 {
					t.Errorf("level %s: %d spans for %d requests, want 6 each", m["rate"], p, done)
				}
				for _, k := range []string{"offered_rps", "completed_rps", "spans_per_s", "step_p50_us", "step_p99_us", "step_max_us", "sustained"} {
					if _, ok := m[k]; !ok {
						t.Errorf("no %s in %v", k, m)
					}
				}
				if m["sustained"] != strconv.FormatBool(tc.wantExport && d == 0 && num(t, m, "shed") == 0 && num(t, m, "waiting") <= 32) {
					t.Errorf("level %s: sustained=%s with dropped %d", m["rate"], m["sustained"], d)
				}
				produced, exported, dropped = produced+p, exported+e, dropped+d
			}
			total := lines[len(lines)-1]
			if _, ok := total["total"]; !ok {
				t.Fatalf("last line %v is not the total", total)
			}
			if num(t, total, "produced") != produced || num(t, total, "exported") != exported || num(t, total, "dropped") != dropped {
				t.Errorf("total %v, levels produced %d exported %d dropped %d", total, produced, exported, dropped)
			}
			if tc.wantExport != (exported == produced) || tc.wantExport == (dropped == produced) {
				t.Errorf("produced %d exported %d dropped %d; want everything exported: %v", produced, exported, dropped, tc.wantExport)
			}
			if exports != nil && exports.Load() == 0 {
				t.Error("the receiver saw no export")
			}
			if tc.findMax {
				if _, ok := lines[levels]["max_rate"]; !ok {
					t.Errorf("no max line: %v", lines[levels])
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startSilent listens on a free local port and accepts connections that it
// never answers: a backend that hangs.
func startSilent(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln
}

// failingWriter fails every write, as a stdout whose reader went away.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) {
	return 0, errors.New("write /dev/stdout: broken pipe")
}

// TestLoadStdoutLost: `llmtrace load … | head -1` loses the result lines
// after the first. The run still ends with its flush and export status,
// but the loss is reported and the status says the results were not
// written, as replay's does; load exited 0 and said nothing.
func TestLoadStdoutLost(t *testing.T) {
	clearOTLPEnv(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	srv, _ := otlpHTTPReceiver(t, http.StatusOK)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	var stderr bytes.Buffer
	args := []string{"-rate", "200", "-duration", "100ms", "-progress", "0", "-in-flight", "8"}
	code := load(context.Background(), args, nil, failingWriter{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "broken pipe") || !strings.Contains(stderr.String(), "2 result line(s) lost") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1 and the 2 lost lines (the level's and the total) reported", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "spans exported") {
		t.Errorf("the export status is missing:\n%s", stderr.String())
	}
}
