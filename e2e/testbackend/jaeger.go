package testbackend

import (
	_ "embed"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/internal/freeport"
)

// JaegerConfig is the Jaeger v2 configuration the tests run with
// (jaeger-test.yaml beside this file): OTLP in, in-memory storage, query API,
// health check, batch timeout 50ms, self-tracing off, every port from env.
//
//go:embed jaeger-test.yaml
var JaegerConfig []byte

// Jaeger is a running Jaeger v2 all-in-one process with in-memory storage,
// started by StartJaeger. Its ports stay the same across Stop and Restart.
type Jaeger struct {
	t    testing.TB
	proc *process

	otlpGRPCPort, otlpHTTPPort   int
	queryHTTPPort, queryGRPCPort int
	healthPort, metricsPort      int

	client *http.Client
}

// StartJaeger starts Jaeger on free ports and waits until it is healthy and
// accepting OTLP. It stops the process when t ends and shows Jaeger's log if
// t failed. With no Jaeger binary (see JaegerBin) it skips t, or fails t
// when CI is set.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin, err := JaegerBin()
	requireBinary(t, "Jaeger", err)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "jaeger-test.yaml")
	if err := os.WriteFile(cfgPath, JaegerConfig, 0o644); err != nil {
		t.Fatalf("testbackend: writing Jaeger config: %v", err)
	}

	const attempts = 3
	for attempt := 1; ; attempt++ {
		ports := freeport.Ports(t, 6)
		j := &Jaeger{
			t:             t,
			otlpGRPCPort:  ports[0],
			otlpHTTPPort:  ports[1],
			queryHTTPPort: ports[2],
			queryGRPCPort: ports[3],
			healthPort:    ports[4],
			metricsPort:   ports[5],
			client:        &http.Client{Timeout: 10 * time.Second},
		}
		j.proc = &process{
			name:    "jaeger",
			bin:     bin,
			args:    []string{"--config=file:" + cfgPath},
			logPath: filepath.Join(dir, fmt.Sprintf("jaeger-%d.log", attempt)),
			env: childEnv([]string{"OTEL_", "JAEGER_"},
				"JAEGER_LISTEN_HOST=127.0.0.1",
				"JAEGER_OTLP_GRPC_PORT="+strconv.Itoa(j.otlpGRPCPort),
				"JAEGER_OTLP_HTTP_PORT="+strconv.Itoa(j.otlpHTTPPort),
				"JAEGER_QUERY_HTTP_PORT="+strconv.Itoa(j.queryHTTPPort),
				"JAEGER_QUERY_GRPC_PORT="+strconv.Itoa(j.queryGRPCPort),
				"JAEGER_HEALTH_PORT="+strconv.Itoa(j.healthPort),
				"JAEGER_METRICS_PORT="+strconv.Itoa(j.metricsPort),
			),
		}
		err = j.start()
		if err == nil {
			j.proc.registerLogOnFailure(t)
			t.Cleanup(func() {
				if err := j.proc.stop(); err != nil {
					t.Errorf("testbackend: %v", err)
				}
			})
			return j
		}
		_ = j.proc.stop()
		log := j.proc.logTail(32 << 10)
		if attempt < attempts && strings.Contains(log, "address already in use") {
			t.Logf("testbackend: Jaeger lost a port race, retrying on new ports: %v", err)
			continue
		}
		t.Fatalf("testbackend: %v\nJaeger log (%s):\n%s", err, j.proc.logPath, log)
	}
}

func (j *Jaeger) start() error {
	if err := j.proc.start(); err != nil {
		return err
	}
	ctx, cancel := startContext(j.t)
	defer cancel()
	return waitReady(ctx, j.proc, j.HealthURL(),
		j.OTLPGRPCEndpoint(), j.OTLPHTTPEndpoint(), j.addr(j.queryHTTPPort))
}

// Stop stops Jaeger (SIGTERM, then kill after 10 s) and waits for it to
// exit; its in-memory traces are lost. Exporters pointed at it then fail
// until Restart. Stopping a stopped Jaeger does nothing. Call it from the
// test's goroutine: it fails the test on error.
func (j *Jaeger) Stop() {
	j.t.Helper()
	if err := j.proc.stop(); err != nil {
		j.t.Fatalf("testbackend: %v", err)
	}
}

// Restart starts a stopped Jaeger again on the same ports (stopping it
// first if it is running) and waits until it is ready. Storage starts empty.
// Call it from the test's goroutine: it fails the test on error.
func (j *Jaeger) Restart() {
	j.t.Helper()
	j.Stop()
	if err := j.start(); err != nil {
		_ = j.proc.stop()
		j.t.Fatalf("testbackend: restarting Jaeger: %v\nJaeger log (%s):\n%s", err, j.proc.logPath, j.proc.logTail(32<<10))
	}
}

// Running reports whether the Jaeger process is running (between a start
// and a Stop).
func (j *Jaeger) Running() bool { return j.proc.running() }

func (j *Jaeger) addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// OTLPGRPCEndpoint is the OTLP/gRPC receiver as host:port (for
// otlptracegrpc.WithEndpoint together with WithInsecure).
func (j *Jaeger) OTLPGRPCEndpoint() string { return j.addr(j.otlpGRPCPort) }

// OTLPHTTPEndpoint is the OTLP/HTTP receiver as host:port (for
// otlptracehttp.WithEndpoint together with WithInsecure).
func (j *Jaeger) OTLPHTTPEndpoint() string { return j.addr(j.otlpHTTPPort) }

// QueryURL is the base URL of the query service (HTTP API, e.g.
// QueryURL()+"/api/v3/services").
func (j *Jaeger) QueryURL() string { return "http://" + j.addr(j.queryHTTPPort) }

// QueryGRPCEndpoint is the query service's gRPC API as host:port.
func (j *Jaeger) QueryGRPCEndpoint() string { return j.addr(j.queryGRPCPort) }

// HealthURL is the health check URL; it answers 200 when Jaeger is ready.
func (j *Jaeger) HealthURL() string { return "http://" + j.addr(j.healthPort) + "/status" }

// MetricsURL is Jaeger's own Prometheus metrics (e.g.
// otelcol_receiver_accepted_spans), ready to be a StartPrometheus target.
func (j *Jaeger) MetricsURL() string { return "http://" + j.addr(j.metricsPort) + "/metrics" }

// LogPath is the file Jaeger's stdout and stderr go to.
func (j *Jaeger) LogPath() string { return j.proc.logPath }
