package openai_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.Cleanup(removeBinary)) }

const prefillBase = 30 * time.Millisecond

func toyConfig(tr *otelstats.Tracker) toyserver.Config {
	return toyserver.Config{
		Models:     []string{"toy"},
		TokenDelay: 2 * time.Millisecond, PrefillBase: prefillBase, PrefillPerToken: 10 * time.Microsecond, Jitter: -1,
		Tracker: tr,
		// Reproducible ids and times, so a traced and an untraced run can
		// be compared byte for byte.
		Now:   func() time.Time { return time.Unix(1_800_000_000, 0) },
		NewID: func() string { return "0123456789abcdef" },
	}
}

// recorder keeps the raw bytes of every response body the SDK read.
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
}

type teeBody struct {
	io.ReadCloser
	buf *bytes.Buffer
	rec *recorder
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	return n, err
}

func (b *teeBody) Close() error {
	b.rec.mu.Lock()
	b.rec.bodies = append(b.rec.bodies, bytes.Clone(b.buf.Bytes()))
	b.rec.mu.Unlock()
	return b.ReadCloser.Close()
}

func (r *recorder) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil {
		resp.Body = &teeBody{ReadCloser: resp.Body, buf: &bytes.Buffer{}, rec: r}
	}
	return resp, err
}

func (r *recorder) last() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[len(r.bodies)-1]
}

// server is the example server, traced or not, with an SDK client.
type server struct {
	client openai.Client
	raw    *recorder
	rec    *tracetest.SpanRecorder
	tr     *otelstats.Tracker

	mu    sync.Mutex
	stats []otelstats.RequestStats
	fin   chan struct{}
}

func newServer(t *testing.T, traced bool) *server {
	t.Helper()
	s := &server{raw: &recorder{}, rec: tracetest.NewSpanRecorder(), fin: make(chan struct{}, 8)}
	var h http.Handler = toyserver.New(toyConfig(nil))
	if traced {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
		tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithAutoSweep(100*time.Millisecond),
			otelstats.WithOnFinish(func(st *otelstats.RequestStats) {
				s.mu.Lock()
				s.stats = append(s.stats, *st)
				s.mu.Unlock()
				s.fin <- struct{}{}
			}))
		if err != nil {
			t.Fatal(err)
		}
		s.tr = tr
		h = openaihttp.NewHandler(toyserver.New(toyConfig(tr)), tr)
	}
	srv := httptest.NewServer(h)
	hc := srv.Client()
	s.client = openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test"), option.WithHTTPClient(hc),
		option.WithMaxRetries(0), option.WithMiddleware(s.raw.middleware))
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		if s.tr != nil {
			_ = s.tr.Shutdown(context.Background())
		}
	})
	return s
}

func (s *server) only(t *testing.T) otelstats.RequestStats {
	t.Helper()
	select {
	case <-s.fin:
	case <-time.After(5 * time.Second):
		t.Fatal("no request finished")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.stats) != 1 {
		t.Fatalf("%d requests finished", len(s.stats))
	}
	return s.stats[0]
}

// tree checks the span tree of one request and returns its spans by name.
func (s *server) tree(t *testing.T, wantNames ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	byName := map[string]sdktrace.ReadOnlySpan{}
	var names []string
	for _, sp := range s.rec.Ended() {
		byName[sp.Name()] = sp
		if sp.Name() == attributes.SpanHandoff {
			continue // present whenever the engine queued the request after its input was processed
		}
		names = append(names, sp.Name())
	}
	slices.Sort(names)
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("spans %v, want %v", names, wantNames)
	}
	root := byName["chat toy"]
	if root.SpanKind() != trace.SpanKindServer || root.Parent().IsValid() {
		t.Errorf("root kind %v parent %v", root.SpanKind(), root.Parent())
	}
	for _, sp := range s.rec.Ended() {
		if sp == root {
			continue
		}
		if sp.Parent().SpanID() != root.SpanContext().SpanID() || sp.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("%s is not a child of the root", sp.Name())
		}
		if sp.StartTime().Before(root.StartTime()) || sp.EndTime().After(root.EndTime()) || sp.EndTime().Before(sp.StartTime()) {
			t.Errorf("%s [%v, %v] outside the root [%v, %v]", sp.Name(), sp.StartTime(), sp.EndTime(), root.StartTime(), root.EndTime())
		}
	}
	return byName
}

func intAttr(t *testing.T, sp sdktrace.ReadOnlySpan, k attribute.Key) int64 {
	t.Helper()
	for _, kv := range sp.Attributes() {
		if kv.Key == k {
			return kv.Value.AsInt64()
		}
	}
	t.Errorf("%s has no %s", sp.Name(), k)
	return -1
}

func chatParams(includeUsage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model: "toy",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a terse assistant."),
			openai.UserMessage("Tell me about tracing LLM requests."),
		},
		Temperature: openai.Float(0.4),
		Seed:        openai.Int(11),
	}
	if includeUsage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

type streamed struct {
	acc          openai.ChatCompletionAccumulator
	sent         time.Time
	firstContent time.Time
	chunks       int
	contentN     int
}

func streamChat(t *testing.T, c openai.Client, p openai.ChatCompletionNewParams) *streamed {
	t.Helper()
	r := &streamed{sent: time.Now()}
	st := c.Chat.Completions.NewStreaming(context.Background(), p)
	for st.Next() {
		ch := st.Current()
		r.acc.AddChunk(ch)
		r.chunks++
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			if r.firstContent.IsZero() {
				r.firstContent = time.Now()
			}
			r.contentN++
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	return r
}

func TestSDKStreamingChat(t *testing.T) {
	plain, traced := newServer(t, false), newServer(t, true)
	want := streamChat(t, plain.client, chatParams(true))
	got := streamChat(t, traced.client, chatParams(true))

	// The SDK received the same bytes with the middleware as without.
	if !bytes.Equal(traced.raw.last(), plain.raw.last()) {
		t.Fatalf("traced stream differs:\n%s\n---\n%s", traced.raw.last(), plain.raw.last())
	}
	if got.acc.Choices[0].Message.Content != want.acc.Choices[0].Message.Content || got.acc.Choices[0].Message.Content == "" {
		t.Fatalf("content %q vs %q", got.acc.Choices[0].Message.Content, want.acc.Choices[0].Message.Content)
	}

	s := traced.only(t)
	sp := traced.tree(t, "chat toy", attributes.SpanInputProcessing, attributes.SpanQueue, attributes.SpanPrefill,
		attributes.SpanDecode, attributes.SpanDetokenize)
	root := sp["chat toy"]

	// Token counts from the SDK's usage.
	u := got.acc.Usage
	if u.PromptTokens == 0 || u.CompletionTokens != int64(got.contentN) {
		t.Fatalf("usage %+v, %d content chunks", u, got.contentN)
	}
	if intAttr(t, root, attributes.UsageInputTokens) != u.PromptTokens || intAttr(t, root, attributes.UsageOutputTokens) != u.CompletionTokens {
		t.Errorf("root tokens differ from the SDK's usage %+v", u)
	}
	if int64(s.NumOutputTokens) != u.CompletionTokens || int64(s.NumPromptTokens.N) != u.PromptTokens {
		t.Errorf("stats tokens %d/%d, usage %+v", s.NumPromptTokens.N, s.NumOutputTokens, u)
	}
	if intAttr(t, sp[attributes.SpanDetokenize], attributes.DetokenizeDeliveries) != int64(got.contentN) {
		t.Error("deliveries differ from the content chunks the SDK saw")
	}
	if got.chunks != got.contentN+3 {
		t.Errorf("%d chunks for %d content chunks: want role, content…, finish, usage", got.chunks, got.contentN)
	}

	// TTFT ends at the first content chunk: after the prefill (the role
	// chunk went out at once), at the end of the first llm.prefill span
	// and the start of llm.detokenize, and no later than the SDK saw it.
	ttft := s.FirstTokenLatency.Value
	if !s.FirstTokenLatency.Valid || ttft < prefillBase || ttft > got.firstContent.Sub(got.sent) {
		t.Errorf("TTFT %v: want ≥ the %v prefill and ≤ %v, when the SDK saw the first content", ttft, prefillBase, got.firstContent.Sub(got.sent))
	}
	if d := sp[attributes.SpanPrefill].EndTime().Sub(root.StartTime()); d != ttft {
		t.Errorf("prefill ends %v after the root's start, TTFT %v", d, ttft)
	}
	if d := sp[attributes.SpanDetokenize].StartTime().Sub(root.StartTime()); d != ttft {
		t.Errorf("detokenize starts %v after the root's start, TTFT %v", d, ttft)
	}
	if s.FinishReason != string(got.acc.Choices[0].FinishReason) {
		t.Errorf("finish %q, SDK %q", s.FinishReason, got.acc.Choices[0].FinishReason)
	}
	for _, kv := range root.Attributes() {
		if kv.Key == attributes.RequestTemperature && kv.Value.AsFloat64() != 0.4 {
			t.Errorf("temperature %v", kv.Value)
		}
	}
}

func TestSDKStreamingChatWithoutUsage(t *testing.T) {
	traced := newServer(t, true)
	got := streamChat(t, traced.client, chatParams(false))
	s := traced.only(t)
	// No usage in the stream: each content chunk is a token, and the
	// server's own tokenization gave the prompt's size.
	if s.NumOutputTokens != got.contentN || !s.NumPromptTokens.Valid || !s.FirstTokenLatency.Valid {
		t.Errorf("stats %+v, %d content chunks", s, got.contentN)
	}
	traced.tree(t, "chat toy", attributes.SpanInputProcessing, attributes.SpanQueue, attributes.SpanPrefill,
		attributes.SpanDecode, attributes.SpanDetokenize)
}

func TestSDKChat(t *testing.T) {
	plain, traced := newServer(t, false), newServer(t, true)
	want, err := plain.client.Chat.Completions.New(context.Background(), chatParams(false))
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	got, err := traced.client.Chat.Completions.New(context.Background(), chatParams(false))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(sent)
	if !bytes.Equal(traced.raw.last(), plain.raw.last()) {
		t.Fatalf("traced response differs:\n%s\n---\n%s", traced.raw.last(), plain.raw.last())
	}
	if got.Choices[0].Message.Content != want.Choices[0].Message.Content {
		t.Fatal("content differs")
	}
	s := traced.only(t)
	// In one piece: no llm.detokenize (no delivery has a time of its own);
	// the engine's steps give the token times.
	sp := traced.tree(t, "chat toy", attributes.SpanInputProcessing, attributes.SpanQueue, attributes.SpanPrefill,
		attributes.SpanDecode)
	if int64(s.NumOutputTokens) != got.Usage.CompletionTokens || int64(s.NumPromptTokens.N) != got.Usage.PromptTokens {
		t.Errorf("stats %d/%d, usage %+v", s.NumPromptTokens.N, s.NumOutputTokens, got.Usage)
	}
	if intAttr(t, sp["chat toy"], attributes.UsageOutputTokens) != got.Usage.CompletionTokens {
		t.Error("output tokens differ from usage")
	}
	// Non-stream: the engine's first decoded token stands in (SPEC §2).
	if !s.FirstTokenLatency.Valid || s.FirstTokenLatency.Value > took || s.FirstTokenLatency.Value < prefillBase {
		t.Errorf("TTFT %v, request took %v", s.FirstTokenLatency.Value, took)
	}
	if s.FinishReason != string(got.Choices[0].FinishReason) {
		t.Errorf("finish %q vs %q", s.FinishReason, got.Choices[0].FinishReason)
	}
}

func TestSDKStreamAbandonedMidway(t *testing.T) {
	traced := newServer(t, true)
	p := chatParams(true)
	p.MaxTokens = openai.Int(400)
	p.Seed = openai.Int(3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := traced.client.Chat.Completions.NewStreaming(ctx, p)
	n := 0
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			if n++; n == 3 {
				cancel()
				break
			}
		}
	}
	_ = st.Close()
	s := traced.only(t)
	if s.FinishReason != otelstats.FinishAbort || s.NumOutputTokens < 3 || !s.FirstTokenLatency.Valid {
		t.Errorf("finish %q tokens %d TTFT %+v", s.FinishReason, s.NumOutputTokens, s.FirstTokenLatency)
	}
}
