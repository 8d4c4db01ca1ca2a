package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/internal/freeport"
)

// The llmtrace binary, built once per test binary into binDir (removed by
// TestMain's goleak cleanup).
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binErr   error
	binBuild []byte
)

func llmtraceBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "llmtrace-proxy-test"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "llmtrace")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/llmtrace/llmtrace/cmd/llmtrace")
		cmd.Dir = filepath.Join("..", "..")
		binBuild, binErr = cmd.CombinedOutput()
	})
	if binErr != nil {
		t.Fatalf("building llmtrace: %v\n%s", binErr, binBuild)
	}
	return binPath
}

func removeBinary(int) {
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// upstream is the toy server, untraced, recording the traceparent of every
// chat request it received ("" when there was none).
type upstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	tps []string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	toy := toyserver.New(toyConfig(nil))
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions" {
			u.mu.Lock()
			u.tps = append(u.tps, r.Header.Get("traceparent"))
			u.mu.Unlock()
		}
		toy.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) traceparents() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.tps)
}

// sdkClient is an SDK client for baseURL that records the raw bodies.
// With drain, closing a response body first reads it to its end.
//
// The SDK closes a stream's body right after [DONE], before the end of the
// chunked body, which drops the connection. When that reaches the proxy
// before the upstream's body ended, the proxy records the complete stream
// as an abort (TestProxyClientLeavesAfterDone), so the tests that check
// the finish reason drain: the body ends only once the proxy's handler
// returned.
func sdkClient(t *testing.T, baseURL string, drain bool) (openai.Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	mw := []option.Middleware{rec.middleware}
	if drain {
		mw = append(mw, func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			if err == nil {
				resp.Body = drainOnClose{resp.Body}
			}
			return resp, err
		})
	}
	return openai.NewClient(option.WithBaseURL(baseURL+"/v1"), option.WithAPIKey("test"),
		option.WithHTTPClient(&http.Client{Transport: tr}), option.WithMaxRetries(0),
		option.WithMiddleware(mw...)), rec
}

type drainOnClose struct{ io.ReadCloser }

func (b drainOnClose) Close() error {
	_, _ = io.Copy(io.Discard, b.ReadCloser)
	return b.ReadCloser.Close()
}

// proxyProc is `llmtrace proxy` running as a subprocess.
type proxyProc struct {
	url                  string
	spansPath, statsPath string
	stdout, stderr       string
	cmd                  *exec.Cmd
	exited               chan struct{}
	waitErr              error
	stopped              bool
}

// freePort is a loopback address for a child to listen on.
func freePort(t *testing.T) string { return freeport.Addr(t) }

// startProxy runs `llmtrace proxy` to upstreamURL with -spans-out and
// -stats-out in a temp dir, and extra flags.
func startProxy(t *testing.T, upstreamURL string, extra ...string) *proxyProc {
	t.Helper()
	bin := llmtraceBinary(t)
	dir := t.TempDir()
	p := &proxyProc{
		spansPath: filepath.Join(dir, "spans.jsonl"), statsPath: filepath.Join(dir, "stats.jsonl"),
		stdout: filepath.Join(dir, "proxy.stdout"), stderr: filepath.Join(dir, "proxy.stderr"),
		exited: make(chan struct{}),
	}
	addr := freePort(t)
	p.url = "http://" + addr
	outF, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append([]string{"proxy", "-listen", addr, "-upstream", upstreamURL,
		"-spans-out", p.spansPath, "-stats-out", p.statsPath, "-stats-log", "0"}, extra...)...)
	// *os.File outputs: no copying goroutines in the test process.
	p.cmd.Stdout, p.cmd.Stderr = outF, errF
	for _, kv := range os.Environ() { // no OTLP export from the developer's environment
		if !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = outF.Close()
	_ = errF.Close()
	// Ends when the process does; every path below waits for that.
	go func() { p.waitErr = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if !p.stopped {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
		if t.Failed() {
			p.dumpLogs(t)
		}
	})

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("proxy exited before listening: %v", p.waitErr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy not listening on %s: %v", addr, err)
		}
	}
}

func (p *proxyProc) dumpLogs(t *testing.T) {
	for _, f := range []string{p.stdout, p.stderr} {
		b, _ := os.ReadFile(f)
		t.Logf("%s:\n%s", filepath.Base(f), b)
	}
}

// stop sends SIGTERM and waits for the drain and flush.
func (p *proxyProc) stop(t *testing.T) {
	t.Helper()
	p.stopped = true
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatal("proxy did not exit on SIGTERM")
	}
	if p.waitErr != nil {
		t.Fatalf("proxy exit: %v", p.waitErr)
	}
}

// jsonSpan is a line of -spans-out (internal/spanlog.Span).
type jsonSpan struct {
	TraceID      string         `json:"trace_id"`
	SpanID       string         `json:"span_id"`
	ParentSpanID string         `json:"parent_span_id"`
	Name         string         `json:"name"`
	Kind         string         `json:"kind"`
	StartNs      int64          `json:"start_ns"`
	EndNs        int64          `json:"end_ns"`
	Status       string         `json:"status"`
	Attributes   map[string]any `json:"attributes"`
}

// jsonStats is a line of -stats-out (otelstats.RequestStats.AppendJSON).
type jsonStats struct {
	Model             string   `json:"model"`
	Operation         string   `json:"operation"`
	FinishReason      string   `json:"finish_reason"`
	ErrorType         string   `json:"error_type"`
	ArrivalTime       float64  `json:"arrival_time"`
	FirstTokenLatency *float64 `json:"first_token_latency_s"`
	NumPromptTokens   *int64   `json:"num_prompt_tokens"`
	NumOutputTokens   int64    `json:"num_output_tokens"`
	TraceID           string   `json:"trace_id"`
	SpanID            string   `json:"span_id"`
}

func readLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v in %s", filepath.Base(path), err, sc.Bytes())
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// proxyTrace is one request's trace from the dump.
type proxyTrace struct {
	root   jsonSpan
	byName map[string]jsonSpan
	stats  jsonStats
}

// traces checks the dumps after the proxy stopped: one trace per upstream
// request, each the traceparent's trace, with a SERVER root "chat toy", a
// CLIENT span "POST" (the upstream call) whose id the traceparent carries,
// and exactly the children wantChildren, inside the root and parented to
// it. It returns them in the order the upstream received the requests.
func (p *proxyProc) traces(t *testing.T, tps []string, wantChildren ...string) []proxyTrace {
	t.Helper()
	spans := readLines[jsonSpan](t, p.spansPath)
	stats := readLines[jsonStats](t, p.statsPath)
	byTrace := map[string][]jsonSpan{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	if len(byTrace) != len(tps) || len(stats) != len(tps) {
		t.Fatalf("%d traces and %d stats lines for %d upstream requests", len(byTrace), len(stats), len(tps))
	}
	want := append([]string{"chat toy", "POST"}, wantChildren...)
	slices.Sort(want)
	var out []proxyTrace
	for _, tp := range tps {
		// traceparent: 00-<trace id>-<parent span id>-<flags>
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 {
			t.Fatalf("upstream traceparent %q", tp)
		}
		tr := proxyTrace{byName: map[string]jsonSpan{}}
		var names []string
		for _, s := range byTrace[parts[1]] {
			tr.byName[s.Name] = s
			names = append(names, s.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Fatalf("trace %s has spans %v, want %v", parts[1], names, want)
		}
		tr.root = tr.byName["chat toy"]
		if tr.root.Kind != "server" || tr.root.ParentSpanID != "" {
			t.Errorf("root kind %q parent %q", tr.root.Kind, tr.root.ParentSpanID)
		}
		// The engine's span would be a child of the upstream call.
		if call := tr.byName["POST"]; parts[2] != call.SpanID || call.Kind != "client" {
			t.Errorf("traceparent parent %s, the upstream call %s (%s)", parts[2], call.SpanID, call.Kind)
		}
		for _, s := range byTrace[parts[1]] {
			if s.SpanID == tr.root.SpanID {
				continue
			}
			if kind := map[bool]string{true: "client", false: "internal"}[s.Name == "POST"]; s.ParentSpanID != tr.root.SpanID || s.Kind != kind {
				t.Errorf("%s (%s) has parent %s, root is %s", s.Name, s.Kind, s.ParentSpanID, tr.root.SpanID)
			}
			if s.StartNs < tr.root.StartNs || s.EndNs > tr.root.EndNs || s.EndNs < s.StartNs {
				t.Errorf("%s [%d, %d] outside the root [%d, %d]", s.Name, s.StartNs, s.EndNs, tr.root.StartNs, tr.root.EndNs)
			}
			if s.Status == "Error" {
				t.Errorf("%s has status %s", s.Name, s.Status)
			}
		}
		n := 0
		for _, s := range stats {
			if s.TraceID == parts[1] {
				tr.stats = s
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d stats lines for trace %s", n, parts[1])
		}
		if tr.stats.SpanID != tr.root.SpanID || tr.stats.Model != "toy" || tr.stats.Operation != "chat" || tr.stats.ErrorType != "" {
			t.Errorf("stats %+v for root %s", tr.stats, tr.root.SpanID)
		}
		out = append(out, tr)
	}
	return out
}

// ttft checks that the stats' TTFT is present and is where the wait span
// ends, measured from the root's start; it returns it.
func (tr *proxyTrace) ttft(t *testing.T) time.Duration {
	t.Helper()
	if tr.stats.FirstTokenLatency == nil {
		t.Fatalf("no first_token_latency_s in %+v", tr.stats)
	}
	ttft := time.Duration(math.Round(*tr.stats.FirstTokenLatency * 1e9))
	wait := tr.byName[attributes.SpanProxyWaitFirstToken]
	if d := time.Duration(wait.EndNs - tr.root.StartNs); (d - ttft).Abs() > time.Microsecond {
		t.Errorf("%s ends %v after the root's start, TTFT %v", wait.Name, d, ttft)
	}
	// The wait starts when the request went upstream, after it arrived.
	if wait.StartNs < tr.root.StartNs || wait.StartNs > wait.EndNs {
		t.Errorf("wait [%d, %d], root starts %d", wait.StartNs, wait.EndNs, tr.root.StartNs)
	}
	return ttft
}

func attrInt(t *testing.T, s jsonSpan, k string) int64 {
	t.Helper()
	v, ok := s.Attributes[k].(float64)
	if !ok {
		t.Errorf("%s has no numeric %s: %v", s.Name, k, s.Attributes[k])
		return -1
	}
	return int64(v)
}

func TestProxyStreamingChat(t *testing.T) {
	// Fresh toy servers for the direct and the proxied run: the toy's
	// prefix cache would otherwise report cached tokens the second time.
	directUp, up := newUpstream(t), newUpstream(t)
	direct, directRaw := sdkClient(t, directUp.srv.URL, true)
	want := streamChat(t, direct, chatParams(true))

	px := startProxy(t, up.srv.URL)
	client, raw := sdkClient(t, px.url, true)
	got := streamChat(t, client, chatParams(true))
	px.stop(t)

	// The SDK received through the proxy exactly what it did directly.
	if !bytes.Equal(raw.last(), directRaw.last()) {
		t.Fatalf("proxied stream differs:\n%s\n---\n%s", raw.last(), directRaw.last())
	}
	if c := got.acc.Choices[0].Message.Content; c == "" || c != want.acc.Choices[0].Message.Content {
		t.Fatalf("content %q vs %q", c, want.acc.Choices[0].Message.Content)
	}
	u := got.acc.Usage
	if u.PromptTokens == 0 || u.CompletionTokens != int64(got.contentN) {
		t.Fatalf("usage %+v, %d content chunks", u, got.contentN)
	}

	tps := up.traceparents()
	if d := directUp.traceparents(); len(tps) != 1 || len(d) != 1 || d[0] != "" {
		t.Fatalf("upstream traceparents %q (direct %q): want one on the proxied request, none on the direct", tps, d)
	}
	tr := px.traces(t, tps, attributes.SpanInputProcessing, attributes.SpanProxyWaitFirstToken, attributes.SpanProxyStream, attributes.SpanDetokenize)[0]

	s := tr.stats
	if s.NumOutputTokens != u.CompletionTokens || s.NumPromptTokens == nil || *s.NumPromptTokens != u.PromptTokens {
		t.Errorf("stats tokens %v/%d, SDK usage %+v", s.NumPromptTokens, s.NumOutputTokens, u)
	}
	if s.FinishReason != string(got.acc.Choices[0].FinishReason) {
		t.Errorf("finish %q, SDK %q", s.FinishReason, got.acc.Choices[0].FinishReason)
	}
	if attrInt(t, tr.root, string(attributes.UsageOutputTokens)) != u.CompletionTokens {
		t.Error("root's output tokens differ from the SDK's usage")
	}

	// TTFT ends at the first content chunk: after the upstream's prefill,
	// no later than the SDK saw it, where the wait ends and the stream and
	// the detokenize span begin.
	ttft := tr.ttft(t)
	if ttft < prefillBase || ttft > got.firstContent.Sub(got.sent) {
		t.Errorf("TTFT %v: want ≥ the %v prefill and ≤ %v, when the SDK saw the first content", ttft, prefillBase, got.firstContent.Sub(got.sent))
	}
	wait, stream, detok := tr.byName[attributes.SpanProxyWaitFirstToken], tr.byName[attributes.SpanProxyStream], tr.byName[attributes.SpanDetokenize]
	if stream.StartNs != wait.EndNs || (time.Duration(detok.StartNs-wait.EndNs)).Abs() > time.Microsecond {
		t.Errorf("wait ends %d, stream starts %d, detokenize starts %d", wait.EndNs, stream.StartNs, detok.StartNs)
	}
	// llm.proxy.chunks counts every SSE event with data, [DONE] too, which
	// the SDK does not hand out.
	if attrInt(t, stream, string(attributes.ProxyContentChunks)) != int64(got.contentN) ||
		attrInt(t, stream, string(attributes.ProxyChunks)) != int64(got.chunks)+1 {
		t.Errorf("stream attributes %v, SDK saw %d chunks, %d with content", stream.Attributes, got.chunks, got.contentN)
	}
}

func TestProxyChat(t *testing.T) {
	// Fresh toy servers for the direct and the proxied run: the toy's
	// prefix cache would otherwise report cached tokens the second time.
	directUp, up := newUpstream(t), newUpstream(t)
	direct, directRaw := sdkClient(t, directUp.srv.URL, true)
	want, err := direct.Chat.Completions.New(context.Background(), chatParams(false))
	if err != nil {
		t.Fatal(err)
	}

	px := startProxy(t, up.srv.URL)
	client, raw := sdkClient(t, px.url, true)
	sent := time.Now()
	got, err := client.Chat.Completions.New(context.Background(), chatParams(false))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(sent)
	px.stop(t)

	if !bytes.Equal(raw.last(), directRaw.last()) {
		t.Fatalf("proxied response differs:\n%s\n---\n%s", raw.last(), directRaw.last())
	}
	if got.Choices[0].Message.Content == "" || got.Choices[0].Message.Content != want.Choices[0].Message.Content {
		t.Fatal("content differs")
	}

	tps := up.traceparents()
	if d := directUp.traceparents(); len(tps) != 1 || len(d) != 1 || d[0] != "" {
		t.Fatalf("upstream traceparents %q (direct %q): want one on the proxied request, none on the direct", tps, d)
	}
	// A JSON response: no llm.proxy.stream (SSE only) and no
	// llm.detokenize (no token times, SPEC §2); llm.input_processing
	// because the usage gave the prompt's size.
	tr := px.traces(t, tps, attributes.SpanInputProcessing, attributes.SpanProxyWaitFirstToken)[0]
	s := tr.stats
	if s.NumOutputTokens != got.Usage.CompletionTokens || s.NumPromptTokens == nil || *s.NumPromptTokens != got.Usage.PromptTokens {
		t.Errorf("stats tokens %v/%d, SDK usage %+v", s.NumPromptTokens, s.NumOutputTokens, got.Usage)
	}
	if s.FinishReason != string(got.Choices[0].FinishReason) {
		t.Errorf("finish %q vs %q", s.FinishReason, got.Choices[0].FinishReason)
	}
	// In one piece: no TTFT; the wait ends at the body's first byte,
	// within the request.
	if tr.stats.FirstTokenLatency != nil {
		t.Errorf("TTFT %v for a response in one piece", *tr.stats.FirstTokenLatency)
	}
	if wait := tr.byName[attributes.SpanProxyWaitFirstToken]; time.Duration(wait.EndNs-tr.root.StartNs) < prefillBase || time.Duration(wait.EndNs-wait.StartNs) > took {
		t.Errorf("wait [%d, %d], root from %d, request took %v", wait.StartNs, wait.EndNs, tr.root.StartNs, took)
	}
	if tr.root.Attributes["gen_ai.response.id"] == nil || tr.root.Attributes["gen_ai.response.model"] != "toy" {
		t.Errorf("root lacks the response's id and model: %v", tr.root.Attributes)
	}
}

// TestProxyClientLeavesAfterDone: a client that read the whole stream,
// [DONE] included, and closed the connection (as the SDK does) before the
// upstream's body ended. The request finished with "stop" for the client,
// and so must it be recorded — not as an abort (a regression test: the
// client's context ending aborts the copy of the upstream's body, which the
// proxy once took for the client leaving). The upstream here ends its body
// 100 ms after [DONE]; with the toy server alone the window is rare but
// real.
func TestProxyClientLeavesAfterDone(t *testing.T) {
	toy := toyserver.New(toyConfig(nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toy.ServeHTTP(w, r)
		_ = http.NewResponseController(w).Flush()
		time.Sleep(100 * time.Millisecond)
	}))
	t.Cleanup(srv.Close)
	px := startProxy(t, srv.URL)
	client, _ := sdkClient(t, px.url, false)
	got := streamChat(t, client, chatParams(true))
	time.Sleep(200 * time.Millisecond) // the upstream's body ends
	px.stop(t)
	st := readLines[jsonStats](t, px.statsPath)
	if len(st) != 1 || st[0].FinishReason != string(got.acc.Choices[0].FinishReason) {
		t.Fatalf("stats %+v, SDK finish %q", st, got.acc.Choices[0].FinishReason)
	}
}
