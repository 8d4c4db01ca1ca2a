package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/internal/freeport"
	"github.com/llmtrace/llmtrace/internal/spanlog"
)

// The binaries under test, built once.
var (
	buildOnce          sync.Once
	buildErr           error
	binDir             string
	mpBin, llmtraceBin string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func build(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "mpbin")
		if buildErr != nil {
			return
		}
		mpBin = filepath.Join(binDir, "multiprocess")
		llmtraceBin = filepath.Join(binDir, "llmtrace")
		for _, b := range [][2]string{{mpBin, "."}, {llmtraceBin, "../../cmd/llmtrace"}} {
			out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// shortDir is a temporary directory short enough for Unix socket paths.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// syncBuffer is a process's output, read by the test while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a started OS process with its output captured.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	// No test exports: the OTEL_* environment of the machine is not ours.
	p.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", p.name, p.out.String())
		}
	})
	return p
}

func (p *proc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		if err != nil {
			t.Fatalf("%s: %v\n%s", p.name, err, p.out.String())
		}
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v\n%s", p.name, within, p.out.String())
	}
}

// freePort is a free loopback TCP port for a child to listen on.
func freePort(t *testing.T) string { return strconv.Itoa(freeport.Port(t)) }

func waitSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type reqStats struct {
	RequestID    string   `json:"request_id"`
	FinishReason string   `json:"finish_reason"`
	TTFT         *float64 `json:"first_token_latency_s"`
	Queue        *float64 `json:"queue_duration_s"`
	Prefill      *float64 `json:"prefill_latency_s"`
	Decode       *float64 `json:"decode_latency_s"`
	Prompt       *int     `json:"num_prompt_tokens"`
	Output       int      `json:"num_output_tokens"`
	Cached       *int     `json:"num_cached_tokens"`
	TraceID      string   `json:"trace_id"`
	SpanID       string   `json:"span_id"`
	Clamped      int      `json:"clamped_spans"`
}

func readStats(t *testing.T, path string) []reqStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []reqStats
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var s reqStats
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out = append(out, s)
	}
	return out
}

func readSpans(t *testing.T, path string) map[string][]spanlog.Span {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sp, err := spanlog.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string][]spanlog.Span{}
	for _, s := range sp {
		by[s.TraceID] = append(by[s.TraceID], s)
	}
	return by
}

const (
	nRequests  = 24
	abortEvery = 8
	// The engine process's clock runs 5 s behind: far more than any
	// scheduling delay on a loaded machine, so what the tests see is the
	// skew's doing (clamped, or aligned away), never the machine's speed.
	// (The README shows -400ms; the behaviour is the same.)
	offset  = "-5s"
	skewOff = 5 * time.Second
)

// checkRun checks that every request's trace is complete and that every
// child span lies inside its root. aligned says whether the collector
// anchored the engine on its own clock.
func checkRun(t *testing.T, stats []reqStats, traces map[string][]spanlog.Span, aligned bool) {
	t.Helper()
	if len(stats) != nRequests {
		t.Fatalf("%d finished requests, want %d", len(stats), nRequests)
	}
	aborts, clamped := 0, 0
	for _, s := range stats {
		if s.FinishReason == "abort" {
			aborts++
		} else {
			clamped += s.Clamped
			if s.FinishReason != "stop" && s.FinishReason != "length" {
				t.Errorf("%s: finish reason %q", s.RequestID, s.FinishReason)
			}
		}
		if s.TTFT == nil || s.Queue == nil || s.Prefill == nil || s.Decode == nil || s.Prompt == nil || s.Output < 3 ||
			s.Cached == nil || *s.Cached != 32 {
			t.Errorf("%s: incomplete stats %+v", s.RequestID, s)
		}
		if !aligned && s.Clamped == 0 {
			t.Errorf("%s: no span clamped although the engine's clock is %s off", s.RequestID, offset)
		}

		spans := traces[s.TraceID]
		var root *spanlog.Span
		names := map[string]int{}
		for i := range spans {
			if spans[i].SpanID == s.SpanID {
				root = &spans[i]
			}
			names[spans[i].Name]++
		}
		if root == nil || root.Name != "chat toy-llm" || root.Kind != "server" {
			t.Errorf("%s: no root span in %v", s.RequestID, names)
			continue
		}
		for _, n := range []string{"llm.input_processing", "llm.queue", "llm.prefill", "llm.decode", "llm.detokenize"} {
			if names[n] == 0 {
				t.Errorf("%s: no %s span (have %v)", s.RequestID, n, names)
			}
		}
		var ip, queue *spanlog.Span
		for i := range spans {
			c := &spans[i]
			if c == root {
				continue
			}
			if c.ParentSpanID != root.SpanID {
				t.Errorf("%s: %s's parent is %s, not the root", s.RequestID, c.Name, c.ParentSpanID)
			}
			if c.StartNs < root.StartNs || c.EndNs > root.EndNs || c.EndNs < c.StartNs {
				t.Errorf("%s: %s [%d, %d] outside its root [%d, %d] or negative", s.RequestID, c.Name,
					c.StartNs, c.EndNs, root.StartNs, root.EndNs)
			}
			switch {
			case c.Name == "llm.input_processing":
				ip = c
			case c.Name == "llm.queue" && c.Attributes["llm.queue.reason"] == "new":
				queue = c
			}
		}
		if aligned && ip != nil && queue != nil {
			// Aligned at the HELLO, the engine's QUEUED follows the
			// frontend's hand-off by the socket's latency, not by the
			// engine clock's 5 s; the alignment is as precise as the HELLO's
			// delivery, so only the skew's size is asserted.
			if d := time.Duration(queue.StartNs - ip.EndNs); d < -skewOff/2 || d > skewOff/2 {
				t.Errorf("%s: engine queued %v after input processing ended; the 5 s skew was not aligned away", s.RequestID, d)
			}
		}
		if !aligned && queue != nil && queue.StartNs != root.StartNs {
			t.Errorf("%s: the skewed engine's queue span was not clamped to the root's start", s.RequestID)
		}
	}
	if want := nRequests / abortEvery; aborts != want {
		t.Errorf("%d aborted requests, want %d", aborts, want)
	}
	t.Logf("%d requests, %d aborted, %d spans clamped outside the aborted ones", len(stats), aborts, clamped)
}

// TestTwoProcesses runs the frontend (with the collector in it) and the
// engine core as two OS processes over Unix sockets, the engine's clock 400
// ms behind: every trace is complete and every child span lies inside its
// root, because the span builder clamps what the skew pushes outside.
func TestTwoProcesses(t *testing.T) {
	build(t)
	dir := shortDir(t)
	eng, col := "unix:"+filepath.Join(dir, "e.sock"), "unix:"+filepath.Join(dir, "c.sock")
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	engine := start(t, "engine", mpBin, "-role", "engine", "-engine", eng, "-collector", col, "-clock-offset", offset)
	frontend := start(t, "frontend", mpBin, "-role", "frontend", "-spawn-engine=false", "-engine", eng, "-collector", col,
		"-n", fmt.Sprint(nRequests), "-abort-every", fmt.Sprint(abortEvery), "-stats-out", statsFile, "-spans-out", spansFile)
	frontend.wait(t, 2*time.Minute)
	engine.wait(t, 30*time.Second)
	checkRun(t, readStats(t, statsFile), readSpans(t, spansFile), false)
	if !strings.Contains(engine.out.String(), "engine stopped") {
		t.Errorf("engine output:\n%s", engine.out.String())
	}
}

// TestThreeProcessesAligned puts `llmtrace collect -align-clocks` in a third
// process; frontend and engine both stream to it. The collector anchors each
// producer on its own clock at the HELLO, so the engine's 400 ms skew
// disappears.
func TestThreeProcessesAligned(t *testing.T) {
	build(t)
	dir := shortDir(t)
	colSock := filepath.Join(dir, "c.sock")
	eng, col := "unix:"+filepath.Join(dir, "e.sock"), "unix:"+colSock
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	collector := start(t, "collect", llmtraceBin, "collect", "-listen", col, "-align-clocks",
		"-stats-out", statsFile, "-spans-out", spansFile, "-stats-log", "0")
	waitSocket(t, colSock)
	engine := start(t, "engine", mpBin, "-role", "engine", "-engine", eng, "-collector", col, "-clock-offset", offset)
	frontend := start(t, "frontend", mpBin, "-role", "frontend", "-spawn-engine=false", "-host-collector=false",
		"-engine", eng, "-collector", col, "-n", fmt.Sprint(nRequests), "-abort-every", fmt.Sprint(abortEvery))
	frontend.wait(t, 2*time.Minute)
	engine.wait(t, 30*time.Second)
	// Both producers flushed before exiting; once the collector has read
	// both streams to their end, stop it.
	waitStreamsEnded(t, collector, 2)
	if err := collector.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	collector.wait(t, 30*time.Second)
	checkRun(t, readStats(t, statsFile), readSpans(t, spansFile), true)
	if out := collector.out.String(); !strings.Contains(out, "dropped=0") || !strings.Contains(out, "rejected=0") {
		t.Errorf("collector lost updates:\n%s", out)
	}
}

// waitStreamsEnded waits until the collector has logged n producer
// streams read to their end.
func waitStreamsEnded(t *testing.T, p *proc, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for strings.Count(p.out.String(), `msg="stream ended`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the collector did not read %d streams to their end:\n%s", n, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPythonProducer runs producer.py — the protocol's 30-line Python
// example — against `llmtrace collect`, in both encodings.
func TestPythonProducer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is required in CI")
		}
		t.Skip("python3 not found")
	}
	build(t)
	// The binary and JSON encodings over a Unix socket, and over TCP to a
	// collector that wants a token (from --token-file, and from the
	// environment).
	for _, tc := range []struct{ mode, net, token string }{
		{"binary", "unix", ""}, {"json", "unix", ""},
		{"binary", "tcp", "file"}, {"json", "tcp", "env"},
	} {
		t.Run(tc.mode+"/"+tc.net+"/token="+tc.token, func(t *testing.T) {
			mode := tc.mode
			dir := shortDir(t)
			sock := filepath.Join(dir, "c.sock")
			statsFile := filepath.Join(dir, "stats.jsonl")
			tokFile := filepath.Join(dir, "token")
			os.WriteFile(tokFile, []byte("py-secret\n"), 0o600)
			cargs := []string{"collect", "-listen", "unix:" + sock, "-stats-out", statsFile, "-stats-log", "0"}
			var addr string
			if tc.net == "tcp" {
				addr = "127.0.0.1:" + freePort(t)
				cargs = append(cargs, "-listen", "tcp:"+addr, "-token-file", tokFile)
			}
			collector := start(t, "collect", llmtraceBin, cargs...)
			waitSocket(t, sock)
			args := []string{"producer.py", "unix:" + sock, "4"}
			if tc.net == "tcp" {
				args[1] = "tcp:" + addr
			}
			if mode == "json" {
				args = append(args, "--json")
			}
			cmd := exec.Command(py, args...)
			cmd.Env = os.Environ()
			switch tc.token {
			case "file":
				cmd.Args = append(cmd.Args, "--token-file", tokFile)
			case "env":
				cmd.Env = append(cmd.Env, "LLMTRACE_COLLECTOR_TOKEN=py-secret")
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("producer.py: %v\n%s", err, out)
			}
			waitStreamsEnded(t, collector, 1)
			collector.cmd.Process.Signal(syscall.SIGINT)
			collector.wait(t, 30*time.Second)
			stats := readStats(t, statsFile)
			if len(stats) != 4 {
				t.Fatalf("%d requests:\n%s", len(stats), collector.out.String())
			}
			for _, s := range stats {
				var i int
				fmt.Sscanf(s.RequestID, "py-%d", &i)
				// The producer sleeps 2 ms between QUEUED and PREFILLING: the
				// queue lasts at least that (float seconds in JSON: 0.5 ms slack).
				if s.FinishReason != "length" || s.Output != 4 || s.Prompt == nil || *s.Prompt != 100+i || s.Cached == nil || *s.Cached != 16 ||
					s.TTFT == nil || s.Queue == nil || *s.Queue < 0.0015 || s.Clamped != 0 {
					t.Errorf("%+v", s)
				}
			}
			if out := collector.out.String(); !strings.Contains(out, "encoding="+mode) || !strings.Contains(out, "rejected=0") {
				t.Errorf("collector:\n%s", out)
			}
		})
	}
}

// TestInterrupt presses Ctrl-C in the middle of a long run: SIGINT to the
// process group, as a terminal sends it to the frontend and the engine it
// spawned. The frontend stops sending, aborts its open requests, reads the
// engine's last updates and shuts down as at the end of a run: every
// request it sent finished (none rejected), the stats, spans and summary
// written, the engine gone, its sockets' temporary directory removed, and
// the exit status the shell's for an interrupt (130).
func TestInterrupt(t *testing.T) {
	build(t)
	dir := shortDir(t)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	p := &proc{name: "frontend", out: &syncBuffer{}, done: make(chan error, 1),
		cmd: exec.Command(mpBin, "-n", "100000", "-abort-every", "0", "-stats-out", statsFile, "-spans-out", spansFile)}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "TMPDIR="+tmp)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("--- frontend and engine output:\n%s", p.out.String())
		}
	})
	// Interrupt once requests have finished: the run is well under way.
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(statsFile)
		if bytes.Count(b, []byte("\n")) >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 10 requests finished within a minute:\n%s", p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-p.done:
		p.done <- err // for Cleanup
	case <-time.After(time.Minute):
		t.Fatalf("the frontend did not exit within a minute of Ctrl-C:\n%s", p.out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Exited() || ee.ExitCode() != 130 {
		t.Errorf("frontend ended with %v, want exit status 130 after a clean stop", err)
	}
	out := p.out.String()
	for _, want := range []string{"interrupted", "requests: ", `msg="engine stopped"`, "rejected=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, `msg=rejected`) {
		t.Errorf("updates were rejected")
	}
	stats := readStats(t, statsFile)
	if len(stats) >= 100000 || len(stats) < 10 {
		t.Fatalf("%d requests finished", len(stats))
	}
	// Every request sent finished: the summary counts what the stats hold.
	if want := fmt.Sprintf("requests: %d ", len(stats)); !strings.Contains(out, want) {
		t.Errorf("the summary does not count the %d finished requests", len(stats))
	}
	traces := readSpans(t, spansFile)
	aborted := 0
	for _, s := range stats {
		if len(traces[s.TraceID]) == 0 {
			t.Errorf("%s: no spans written", s.RequestID)
		}
		if s.FinishReason == "abort" {
			aborted++
		}
	}
	if aborted == 0 {
		t.Errorf("no request was open at the interrupt (none aborted)")
	}
	// The engine exited, and nothing is left in the temporary directory.
	if err := syscall.Kill(-p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("a process of the group is still there after the frontend exited (%v)", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
	t.Logf("interrupted after %d requests, %d of them aborted", len(stats), aborted)
}
