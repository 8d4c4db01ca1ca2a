package toyserver_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type rig struct {
	rec   *tracetest.SpanRecorder
	tr    *otelstats.Tracker
	url   string
	c     *http.Client
	mu    sync.Mutex
	stats []otelstats.RequestStats
	fin   chan struct{}
}

func fixed(cfg toyserver.Config) toyserver.Config {
	cfg.Now = func() time.Time { return time.Unix(1_800_000_000, 0) }
	cfg.NewID = func() string { return "fixed" }
	cfg.TokenDelay, cfg.PrefillBase, cfg.PrefillPerToken = 2*time.Millisecond, time.Millisecond, 10*time.Microsecond
	return cfg
}

// newRig serves the toy server, traced when traced is set.
func newRig(t *testing.T, traced bool) *rig {
	t.Helper()
	r := &rig{rec: tracetest.NewSpanRecorder(), fin: make(chan struct{}, 16)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithAutoSweep(50*time.Millisecond),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			r.mu.Lock()
			r.stats = append(r.stats, *s)
			r.mu.Unlock()
			r.fin <- struct{}{}
		}))
	if err != nil {
		t.Fatal(err)
	}
	r.tr = tr
	var h http.Handler = toyserver.New(fixed(toyserver.Config{Models: []string{"toy"}}))
	if traced {
		h = openaihttp.NewHandler(toyserver.New(fixed(toyserver.Config{Models: []string{"toy"}, Tracker: tr})), tr)
	}
	srv := httptest.NewServer(h)
	r.url, r.c = srv.URL, srv.Client()
	t.Cleanup(func() {
		r.c.CloseIdleConnections()
		srv.Close()
		_ = tr.Shutdown(context.Background())
	})
	return r
}

func (r *rig) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	resp, err := r.c.Post(r.url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *rig) only(t *testing.T) otelstats.RequestStats {
	t.Helper()
	select {
	case <-r.fin:
	case <-time.After(5 * time.Second):
		t.Fatal("no request finished")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats[0]
}

const chat = `{"model":"toy","stream":true,"stream_options":{"include_usage":true},"temperature":0.3,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say something"}]}`

func TestTracedToyServerSpanTree(t *testing.T) {
	plain := newRig(t, false)
	_, want := plain.post(t, "/v1/chat/completions", chat)

	r := newRig(t, true)
	code, got := r.post(t, "/v1/chat/completions", chat)
	if code != 200 || got != want {
		t.Fatalf("traced response differs from untraced:\n%s\n---\n%s", got, want)
	}
	s := r.only(t)
	names := []string{}
	for _, sp := range r.rec.Ended() {
		names = append(names, sp.Name())
	}
	slices.Sort(names)
	wantNames := []string{"chat toy", attributes.SpanDecode, attributes.SpanDetokenize, attributes.SpanHandoff, attributes.SpanInputProcessing, attributes.SpanPrefill, attributes.SpanQueue}
	if !slices.Equal(names, wantNames) {
		t.Errorf("spans %v, want %v", names, wantNames)
	}
	// The usage chunk agrees with the trace.
	var usageLine string
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, `"usage":{`) {
			usageLine = l
		}
	}
	if !strings.Contains(usageLine, `"prompt_tokens":`+itoa(s.NumPromptTokens.N)) || !strings.Contains(usageLine, `"completion_tokens":`+itoa(s.NumOutputTokens)) {
		t.Errorf("usage %s vs stats prompt %d output %d", usageLine, s.NumPromptTokens.N, s.NumOutputTokens)
	}
	if !s.FirstTokenLatency.Valid || !s.QueueDuration.Valid || !s.PrefillLatency.Valid || s.FinishReason != "stop" {
		t.Errorf("stats %+v", s)
	}
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

func TestToyServerNonStreamAndCompletions(t *testing.T) {
	r := newRig(t, true)
	code, body := r.post(t, "/v1/completions", `{"model":"toy","prompt":"Once upon a time","max_tokens":3}`)
	if code != 200 || !strings.Contains(body, `"finish_reason":"length"`) || !strings.HasPrefix(body, `{"id":"cmpl-fixed","object":"text_completion"`) {
		t.Fatalf("%d %s", code, body)
	}
	s := r.only(t)
	if s.Operation != "text_completion" || s.NumOutputTokens != 3 || s.FinishReason != "length" {
		t.Errorf("stats %+v", s)
	}
}

func TestToyServerDisconnect(t *testing.T) {
	r := newRig(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"toy","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"long"}],"seed":1}`))
	resp, err := r.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 3 && sc.Scan(); {
		if strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"role"`) {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	s := r.only(t)
	if s.FinishReason != otelstats.FinishAbort || s.NumOutputTokens < 3 {
		t.Errorf("finish %q, %d tokens", s.FinishReason, s.NumOutputTokens)
	}
}

func TestToyServerRejectsBadRequests(t *testing.T) {
	r := newRig(t, true)
	for _, c := range []struct{ body, want string }{
		{`{"model":"toy","messages":[`, "invalid JSON"},
		{`{"model":"toy","messages":[]}`, "messages must not be empty"},
		{`{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, "does not exist"},
	} {
		code, body := r.post(t, "/v1/chat/completions", c.body)
		if code < 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s", c.body, code, body)
		}
	}
}
