package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/internal/spanlog"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

func TestMain(m *testing.M) {
	// No test may export: the OTEL_* environment of the machine is not ours.
	os.Setenv("OTEL_TRACES_EXPORTER", "none")
	os.Setenv("OTEL_METRICS_EXPORTER", "none")
	goleak.VerifyTestMain(m)
}

// shortDir is a temporary directory short enough for a Unix socket path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func readStats(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out[m["request_id"].(string)] = m
	}
	return out
}

func TestCollectStdin(t *testing.T) {
	dir := t.TempDir()
	in := strings.Join(append(liveRequest(), `garbage line`, ``), "\n")
	var stderr bytes.Buffer
	statsFile := filepath.Join(dir, "stats.jsonl")
	code := collect(context.Background(), []string{"-listen", "-", "-stats-out", statsFile, "-stats-log", "0"},
		strings.NewReader(in), &bytes.Buffer{}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	s := readStats(t, statsFile)["r1"]
	if s == nil {
		t.Fatalf("no stats; stderr:\n%s", stderr.String())
	}
	near := func(k string, want float64) {
		if v, _ := s[k].(float64); v < want-1e-9 || v > want+1e-9 {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
	near("queue_duration_s", 0.003)
	near("first_token_latency_s", 0.010)
	near("e2e_latency_s", 0.020)
	if !strings.Contains(stderr.String(), "malformed=1") {
		t.Errorf("stderr does not count the garbage line:\n%s", stderr.String())
	}
}

func TestCollectUnixSocket(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "c.sock")
	statsFile := filepath.Join(dir, "stats.jsonl")
	spansFile := filepath.Join(dir, "spans.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	stderr := &lockedBuffer{}
	go func() {
		done <- collect(ctx, []string{"-listen", "unix:" + sock, "-listen", "tcp:127.0.0.1:0", "-stats-out", statsFile,
			"-spans-out", spansFile, "-stats-log", "0"}, nil, &bytes.Buffer{}, stderr)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("collect did not listen: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	p, err := transport.NewProducer(transport.ProducerConfig{Addr: "unix:" + sock, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for i := range 3 {
		id := fmt.Sprint("u", i)
		for _, u := range []otelstats.Update{
			{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"},
			{RequestID: id, Kind: otelstats.KindQueued, Time: ms(1)},
			{RequestID: id, Kind: otelstats.KindPrefilling, Time: ms(2), NumComputedTokens: 4},
			{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(3)},
			{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: ms(4), FinishReason: "length"},
		} {
			p.Send(u)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The collector has read the producer's stream to its end.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "producer=test"); {
		if time.Now().After(deadline) {
			t.Fatalf("the producer's stream did not end: %s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	stats := readStats(t, statsFile)
	if len(stats) != 3 || stats["u2"]["finish_reason"] != "length" {
		t.Fatalf("stats %v\nstderr:\n%s", stats, stderr.String())
	}
	sp, err := readSpans(t, spansFile)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, s := range sp {
		names[s.Name]++
	}
	if names["chat m"] != 3 || names["llm.prefill"] != 3 || names["llm.decode"] != 3 || names["llm.queue"] != 3 {
		t.Errorf("spans %v", names)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestCollectUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := collect(context.Background(), nil, nil, &bytes.Buffer{}, &stderr); code != 2 {
		t.Errorf("no -listen: exit %d", code)
	}
	if code := collect(context.Background(), []string{"-listen", "tcp:0.0.0.0:0"}, nil, &bytes.Buffer{}, &stderr); code != 1 {
		t.Errorf("remote TCP: exit %d", code)
	}
	if !strings.Contains(stderr.String(), "loopback") {
		t.Errorf("stderr: %s", stderr.String())
	}
	// A port out of range is a usage error, found before anything starts.
	stderr.Reset()
	if code := collect(context.Background(), []string{"-listen", "tcp:[::1]:99999"}, nil, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "invalid port") {
		t.Errorf("port 99999: exit %d: %s", code, stderr.String())
	}
	// -http's likewise: it said "listen tcp: … invalid port", exit 1, and
	// for an address without a port that it was not on loopback.
	for _, c := range [][2]string{{"127.0.0.1:99999", "invalid port"}, {"bogus", "missing port"}, {"localhost", "missing port"}} {
		stderr.Reset()
		if code := collect(context.Background(), []string{"-http", c[0]}, nil, &bytes.Buffer{}, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), c[1]) || strings.Contains(stderr.String(), "loopback") {
			t.Errorf("-http %s: exit %d: %s", c[0], code, stderr.String())
		}
	}
	// An output that cannot be created is named by its flag, as the
	// proxy names it: "open /nonexistent/s.jsonl" said neither which.
	for _, flag := range []string{"-stats-out", "-spans-out"} {
		stderr.Reset()
		if code := collect(context.Background(), []string{"-listen", "-", flag, "/nonexistent/s.jsonl"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), flag+": open /nonexistent/s.jsonl") {
			t.Errorf("%s: exit %d: %s", flag, code, stderr.String())
		}
	}
	// A -queue the machine cannot allocate, or workers past any use, is
	// refused before anything is allocated: -queue 20000000 crashed the
	// runtime (out of memory, a stack dump) at start.
	for _, args := range [][]string{{"-queue", "2000000000"}, {"-queue", "4194305"}, {"-workers", "1000000"}} {
		stderr.Reset()
		if code := collect(context.Background(), append([]string{"-listen", "-"}, args...), strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), "-queue is at most 4194304") {
			t.Errorf("%v: exit %d: %s", args, code, stderr.String())
		}
	}
	// An address of no known form says so, without a "(<nil>)" cause.
	for _, addr := range []string{"bogus", "udp:1.2.3.4:5", "unix:"} {
		stderr.Reset()
		if code := collect(context.Background(), []string{"-listen", addr}, nil, &bytes.Buffer{}, &stderr); code != 2 ||
			!strings.Contains(stderr.String(), "want unix:PATH") || strings.Contains(stderr.String(), "nil") {
			t.Errorf("-listen %s: exit %d: %s", addr, code, stderr.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCollectExitBackendSilent: an OTLP endpoint that accepts and never
// answers must not cost the local outputs: -stats-out and -spans-out are
// written out and closed before the export takes its bound (it took the
// shared one, and the stats file's close failed with the deadline).
func TestCollectExitBackendSilent(t *testing.T) {
	exportToSilentBackend(t)
	in := strings.Join(append(liveRequest(), ``), "\n")
	dir := t.TempDir()
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	var stderr bytes.Buffer
	code := collect(context.Background(), []string{"-listen", "-", "-stats-out", statsFile, "-spans-out", spansFile, "-stats-log", "0"},
		strings.NewReader(in), &bytes.Buffer{}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if s := readStats(t, statsFile); len(s) != 1 {
		t.Errorf("%d stats lines, want 1", len(s))
	}
	if sp, _ := readSpans(t, spansFile); len(sp) == 0 {
		t.Errorf("no spans in -spans-out")
	}
	if strings.Contains(stderr.String(), "-stats-out") || strings.Contains(stderr.String(), "-spans-out") {
		t.Errorf("an output's failure reported:\n%s", stderr.String())
	}
}

// liveRequest is the update log of one request, r1, with a HELLO: collect
// is live, so its times are now-ish, or the auto-sweep would end the
// request as abandoned (historical logs are for llmtrace replay).
func liveRequest() []string {
	now := fmt.Sprintf("%d.5", time.Now().Unix())
	return []string{
		`{"type":"HELLO","producer":"py","wall_ts":` + now + `,"mono_ts":10}`,
		`{"request_id":"r1","type":"ARRIVED","ts":` + now + `,"model":"m"}`,
		`{"request_id":"r1","type":"QUEUED","mono_ts":10.001}`,
		`{"request_id":"r1","type":"PREFILLING","mono_ts":10.004,"num_computed_tokens":8,"num_cached_tokens":0}`,
		`{"request_id":"r1","type":"DECODING","mono_ts":10.010}`,
		`{"request_id":"r1","type":"FINISHED","side":"engine","mono_ts":10.020,"finish_reason":"stop"}`,
	}
}

// exportToSilentBackend points the OTLP exporters at an endpoint that
// accepts and never answers, with bounds so long that only the command's
// own exit bound (exitFlushWait, one second here) ends the export.
func exportToSilentBackend(t *testing.T) {
	silent := startSilent(t)
	for k, v := range map[string]string{
		"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + silent.Addr().String(),
		"OTEL_BSP_EXPORT_TIMEOUT": "600000", "OTEL_EXPORTER_OTLP_TIMEOUT": "600000", "OTEL_BSP_SCHEDULE_DELAY": "600000",
	} {
		t.Setenv(k, v)
	}
	d := exitFlushWait
	t.Cleanup(func() { exitFlushWait = d })
	exitFlushWait = time.Second
}

// readSpans reads a -spans-out file.
func readSpans(t *testing.T, path string) ([]spanlog.Span, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return spanlog.Read(f)
}

// TestCollectExitKeepsEveryLine: at exit the tracker ends every request
// still in flight at once. With -stats-out on a pipe whose reader lags,
// that burst used to overflow the writer's pending bound and lose lines
// (and make collect exit 1); at exit the lines now wait for the file.
func TestCollectExitKeepsEveryLine(t *testing.T) {
	const n = 50_000 // 400 bytes a line: 20 MB, more than twice the pending bound
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stats.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	inR, inW := io.Pipe()
	closed := make(chan struct{})
	lines := make(chan int, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until collect opens it
		if err != nil {
			t.Error(err)
			lines <- 0
			return
		}
		defer f.Close()
		<-closed
		time.Sleep(500 * time.Millisecond) // lag behind the exit's burst
		b, _ := io.ReadAll(f)
		lines <- bytes.Count(b, []byte{'\n'})
	}()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- collect(context.Background(), []string{"-listen", "-", "-stats-out", fifo, "-stats-log", "0", "-workers", "1"},
			inR, &bytes.Buffer{}, &stderr)
	}()
	now := float64(time.Now().UnixNano()) / 1e9
	var in bytes.Buffer
	fmt.Fprintf(&in, `{"type":"HELLO","producer":"py","wall_ts":%.6f,"mono_ts":10}`+"\n", now)
	for i := range n {
		fmt.Fprintf(&in, `{"request_id":"r%d","type":"ARRIVED","ts":%.6f,"model":"m"}`+"\n", i, now)
		fmt.Fprintf(&in, `{"request_id":"r%d","type":"QUEUED","mono_ts":10.001}`+"\n", i)
	}
	if _, err := inW.Write(in.Bytes()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the last lines be read
	inW.Close()
	close(closed)
	if c := <-code; c != 0 {
		t.Errorf("exit %d: %s", c, stderr.String())
	}
	if got := <-lines; got != n {
		t.Errorf("%d stats lines of the %d requests in flight at exit", got, n)
	}
}

// TestCollectIdleTimeoutZeroIsNever: -idle-timeout 0 is no bound, as the
// proxy's -idle-timeout 0 is; transport reads a zero IdleTimeout as its
// default, so 0 silently closed idle producers after 2 minutes.
func TestCollectIdleTimeoutZeroIsNever(t *testing.T) {
	for _, c := range []struct {
		arg   string
		never bool
	}{{"0", true}, {"0s", true}, {"-1s", true}, {"90s", false}} {
		cfg, code, ok := parseCollect([]string{"-listen", "-", "-idle-timeout", c.arg}, strings.NewReader(""), io.Discard)
		if !ok {
			t.Fatalf("-idle-timeout %s: exit %d", c.arg, code)
		}
		if got := cfg.server.Collector.IdleTimeout; (got < 0) != c.never || got == 0 {
			t.Errorf("-idle-timeout %s: IdleTimeout %v, want never: %v", c.arg, got, c.never)
		}
	}
}
