package openaihttp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

const chatBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],` +
	`"temperature":0.2,"top_p":0.9,"max_completion_tokens":50,"seed":7,"n":1,"frequency_penalty":0.5,"presence_penalty":-0.5,"stop":["\n","END"]}`

func TestStreamChatSpanTreeTTFTAndUsage(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{
		events: chatStream([]string{"Hel", "lo", ",", " wor", "ld"}, "stop",
			`{"prompt_tokens":17,"completion_tokens":7,"total_tokens":24,"prompt_tokens_details":{"cached_tokens":4}}`),
		pause: 5 * time.Millisecond,
	}
	srv, c := serve(t, x.handler(fs, x.tr))
	sent := time.Now()
	resp, body := post(t, c, srv.URL+"/v1/chat/completions", chatBody)
	s := x.only()

	// The client got exactly the handler's stream, and the handler exactly
	// the client's body.
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if got := sseData(body); !slices.Equal(got, fs.events) {
		t.Fatalf("client got %q, want %q", got, fs.events)
	}
	if string(fs.gotBody) != chatBody {
		t.Fatalf("handler got %q", fs.gotBody)
	}

	if s.FinishReason != "stop" || s.ErrorType != "" {
		t.Errorf("finish %q/%q", s.FinishReason, s.ErrorType)
	}
	// Five content chunks, 7 tokens by the usage: the last delivery carries
	// the difference.
	if s.NumOutputTokens != 7 || !s.NumPromptTokens.Valid || s.NumPromptTokens.N != 17 {
		t.Errorf("tokens: %d out, %+v prompt; want 7, 17", s.NumOutputTokens, s.NumPromptTokens)
	}
	if len(s.OutputTokenLatencies) != 4 {
		t.Errorf("ITL gaps = %d, want 4 (one per delivery)", len(s.OutputTokenLatencies))
	}
	// TTFT ends at the first content chunk (the second event), not at the
	// role-only one.
	firstContent := fs.written[1].Sub(fs.started)
	if !s.FirstTokenLatency.Valid || s.FirstTokenLatency.Value < firstContent || s.FirstTokenLatency.Value > fs.flushed[1].Sub(sent) {
		t.Errorf("TTFT %v; the first content chunk was written %v after the handler started, flushed %v after the client sent",
			s.FirstTokenLatency.Value, firstContent, fs.flushed[1].Sub(sent))
	}
	if s.FirstTokenLatency.Value > fs.written[2].Sub(sent) {
		t.Errorf("TTFT %v is past the second content chunk", s.FirstTokenLatency.Value)
	}

	root := x.span("chat m")
	want := []string{"chat m", attributes.SpanDetokenize, attributes.SpanInputProcessing}
	if names := x.spanNames(); !slices.Equal(names, want) {
		t.Errorf("spans %v, want %v", names, want)
	}
	for _, sp := range x.rec.Ended() {
		if sp != root && sp.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the root", sp.Name())
		}
	}
	if root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root kind %v", root.SpanKind())
	}
	detok := x.span(attributes.SpanDetokenize)
	if got := detok.StartTime().Sub(root.StartTime()); got != s.FirstTokenLatency.Value {
		t.Errorf("detokenize starts %v after the root, TTFT is %v", got, s.FirstTokenLatency.Value)
	}
	if v, _ := attr(detok, attributes.DetokenizeDeliveries); v.AsInt64() != 5 {
		t.Errorf("deliveries = %v, want 5 content chunks", v)
	}
	for k, want := range map[attribute.Key]any{
		attributes.UsageInputTokens:        int64(17),
		attributes.UsageOutputTokens:       int64(7),
		attributes.RequestTemperature:      0.2,
		attributes.RequestTopP:             0.9,
		attributes.RequestMaxTokens:        int64(50),
		attributes.RequestSeed:             int64(7),
		attributes.RequestChoiceCount:      int64(1),
		attributes.RequestFrequencyPenalty: 0.5,
		attributes.RequestPresencePenalty:  -0.5,
		attributes.OperationName:           "chat",
		attributes.RequestModel:            "m",
	} {
		v, ok := attr(root, k)
		if !ok || v.AsInterface() != want {
			t.Errorf("%s = %v (%v), want %v", k, v.AsInterface(), ok, want)
		}
	}
	if v, _ := attr(root, attributes.RequestStopSequences); !slices.Equal(v.AsStringSlice(), []string{"\n", "END"}) {
		t.Errorf("stop = %v", v.AsStringSlice())
	}

	if n := x.counter(attributes.MetricRequests, attributes.FinishReason.String("stop")); n != 1 {
		t.Errorf("requests{stop} = %d", n)
	}
	if n := x.counter(attributes.MetricGenerationTokens); n != 7 {
		t.Errorf("generation tokens = %d", n)
	}
	if n := x.counter(attributes.MetricPromptTokens); n != 17 {
		t.Errorf("prompt tokens = %d", n)
	}
	if n := x.histCount(attributes.MetricTimeToFirstToken); n != 1 {
		t.Errorf("TTFT histogram count %d", n)
	}
}

func TestStreamWithoutUsage(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{events: chatStream([]string{"a", "b", "c"}, "length", "")}
	srv, c := serve(t, x.handler(fs, x.tr))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true,"temperature":1}`)
	s := x.only()
	if s.NumOutputTokens != 3 || s.NumPromptTokens.Valid || s.FinishReason != "length" {
		t.Errorf("out %d prompt %+v finish %q; want 3 chunks as tokens, no prompt size, length", s.NumOutputTokens, s.NumPromptTokens, s.FinishReason)
	}
	if x.hasSpan(attributes.SpanInputProcessing) {
		t.Error("input processing recorded without a prompt size")
	}
}

func TestStreamHandlerReportsInput(t *testing.T) {
	x := newH(t)
	var reported time.Time
	var reqID string
	fs := &fakeServer{events: chatStream([]string{"a", "b"}, "stop", ""), pause: 2 * time.Millisecond}
	fs.onStart = func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * time.Millisecond) // templating, tokenizing
		reported = time.Now()
		if err := openaihttp.InputProcessed(r.Context(), reported, 33); err != nil {
			t.Error(err)
		}
		if err := openaihttp.InputProcessed(r.Context(), time.Now(), 34); !errors.Is(err, openaihttp.ErrTooLate) {
			t.Errorf("second report: %v", err)
		}
		reqID = otelstats.RequestFromContext(r.Context()).ID()
	}
	srv, c := serve(t, x.handler(fs, x.tr))
	sent := time.Now()
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true,"top_p":0.5}`)
	s := x.only()
	if s.RequestID != reqID {
		t.Errorf("request id %q, the handler saw %q", s.RequestID, reqID)
	}
	if s.NumPromptTokens.N != 33 || s.NumOutputTokens != 2 {
		t.Errorf("prompt %+v, out %d", s.NumPromptTokens, s.NumOutputTokens)
	}
	root, in := x.span("chat m"), x.span(attributes.SpanInputProcessing)
	// The tracker maps times onto wall time through its anchor; compare
	// with monotonic readings instead: the request arrived after the client
	// sent it and before the handler started.
	if got := in.EndTime().Sub(root.StartTime()); got < reported.Sub(fs.started) || got > reported.Sub(sent) {
		t.Errorf("input processing ends %v after arrival; the handler reported %v after it started, %v after the client sent",
			got, reported.Sub(fs.started), reported.Sub(sent))
	}
	if v, ok := attr(root, attributes.RequestTopP); !ok || v.AsFloat64() != 0.5 {
		t.Error("sampling params missing")
	}
	if err := openaihttp.InputProcessed(context.Background(), time.Now(), 1); !errors.Is(err, openaihttp.ErrNotTraced) {
		t.Errorf("untraced: %v", err)
	}
}

func TestNonStream(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{
		json: `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"length"}],` +
			`"usage":{"prompt_tokens":11,"completion_tokens":9,"total_tokens":20}}`,
		pause: 4 * time.Millisecond,
	}
	srv, c := serve(t, x.handler(fs, x.tr))
	_, body := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","max_tokens":9,"messages":[]}`)
	if string(body) != fs.json {
		t.Fatalf("body changed: %s", body)
	}
	s := x.only()
	if s.FinishReason != "length" || s.NumOutputTokens != 9 || s.NumPromptTokens.N != 11 {
		t.Errorf("finish %q out %d prompt %+v", s.FinishReason, s.NumOutputTokens, s.NumPromptTokens)
	}
	// SPEC §2: a response in one piece has no token times.
	if s.FirstTokenLatency.Valid || s.TimePerOutputToken.Valid || s.DecodeLatency.Valid || len(s.OutputTokenLatencies) != 0 {
		t.Errorf("token times of a response in one piece: TTFT %+v TPOT %+v decode %+v ITL %v",
			s.FirstTokenLatency, s.TimePerOutputToken, s.DecodeLatency, s.OutputTokenLatencies)
	}
	if !s.E2ELatency.Valid || s.E2ELatency.Value < 4*time.Millisecond {
		t.Errorf("e2e %+v", s.E2ELatency)
	}
	for _, m := range []string{attributes.MetricTimeToFirstToken, attributes.MetricTimePerOutputToken, attributes.MetricInterTokenLatency, attributes.MetricDecodeDuration} {
		if n := x.histCount(m); n != 0 {
			t.Errorf("%s has %d points for a response in one piece", m, n)
		}
	}
	if n := x.histCount(attributes.MetricRequestDuration); n != 1 {
		t.Errorf("request duration count %d", n)
	}
	if n := x.counter(attributes.MetricGenerationTokens); n != 9 {
		t.Errorf("generation tokens %d, want the usage's 9", n)
	}
	root := x.span("chat m")
	if v, _ := attr(root, attributes.RequestMaxTokens); v.AsInt64() != 9 {
		t.Error("max_tokens missing")
	}
	if v, _ := attr(root, attributes.ResponseID); v.AsString() != "chatcmpl-1" {
		t.Errorf("gen_ai.response.id %q", v.AsString())
	}
	if v, _ := attr(root, attributes.ResponseModel); v.AsString() != "m" {
		t.Errorf("gen_ai.response.model %q", v.AsString())
	}
	if x.hasSpan(attributes.SpanDetokenize) {
		t.Error("a detokenize span for a response in one piece")
	}
	if !x.hasSpan(attributes.SpanInputProcessing) {
		t.Error("no input processing span though usage gave the prompt's size")
	}
}

func TestCompletionsEndpoint(t *testing.T) {
	x := newH(t)
	ev := []string{
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"","finish_reason":null}]}`,
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"Once","finish_reason":null}]}`,
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" upon","finish_reason":"length"}]}`,
		`{"id":"cmpl-1","object":"text_completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
		"[DONE]",
	}
	fs := &fakeServer{events: ev}
	srv, c := serve(t, x.handler(fs, x.tr))
	post(t, c, srv.URL+"/v1/completions", `{"model":"gpt2","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`)
	s := x.only()
	if s.Operation != "text_completion" || s.NumOutputTokens != 2 || s.NumPromptTokens.N != 3 || s.FinishReason != "length" {
		t.Errorf("stats %+v", s)
	}
	x.span("text_completion gpt2")
}

func TestResponsesEndpoint(t *testing.T) {
	x := newH(t)
	ev := []string{
		`{"type":"response.created","response":{"status":"in_progress"}}`,
		`{"type":"response.output_item.added","item":{"type":"message"}}`,
		`{"type":"response.output_text.delta","delta":"Hi"}`,
		`{"type":"response.output_text.delta","delta":""}`,
		`{"type":"response.output_text.delta","delta":" you"}`,
		`{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":8,"output_tokens":2,"input_tokens_details":{"cached_tokens":0}}}}`,
	}
	fs := &fakeServer{events: ev}
	srv, c := serve(t, x.handler(fs, x.tr))
	post(t, c, srv.URL+"/v1/responses", `{"model":"m","input":"hi","stream":true,"max_output_tokens":64}`)
	s := x.only()
	if s.NumOutputTokens != 2 || s.NumPromptTokens.N != 8 || s.FinishReason != "stop" {
		t.Errorf("stats %+v", s)
	}
	if v, _ := attr(x.span("chat m"), attributes.RequestMaxTokens); v.AsInt64() != 64 {
		t.Error("max_output_tokens missing")
	}
}

func TestClientDisconnectMidStreamIsAbort(t *testing.T) {
	x := newH(t)
	words := make([]string, 200)
	for i := range words {
		words[i] = "w"
	}
	fs := &fakeServer{events: chatStream(words, "stop", ""), pause: 2 * time.Millisecond, finished: make(chan struct{})}
	srv, c := serve(t, x.handler(fs, x.tr))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	content := 0
	for content < 3 && sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"w"`) {
			content++
		}
	}
	cancel() // the client goes away after three content chunks
	resp.Body.Close()
	<-fs.finished

	s := x.only()
	if s.FinishReason != otelstats.FinishAbort || s.ErrorType != "abort" {
		t.Fatalf("finish %q/%q, want abort", s.FinishReason, s.ErrorType)
	}
	if s.NumOutputTokens < 3 || s.NumOutputTokens >= 200 {
		t.Errorf("output tokens %d: want the delivered ones, ≥ 3", s.NumOutputTokens)
	}
	if !s.FirstTokenLatency.Valid {
		t.Error("no TTFT for an abort after the first token")
	}
	root := x.span("chat m")
	if root.Status().Code.String() != "Error" {
		t.Errorf("root status %v", root.Status())
	}
	if !x.hasSpan(attributes.SpanDetokenize) {
		t.Error("no partial detokenize span")
	}
	if n := x.counter(attributes.MetricRequests, attributes.FinishReason.String("abort")); n != 1 {
		t.Errorf("requests{abort} = %d", n)
	}
	if n := x.histCount(attributes.MetricRequestDuration); n != 1 {
		t.Errorf("request duration count %d", n)
	}
}

func TestHandlerErrorStatus(t *testing.T) {
	for _, code := range []int{500, 503, 429, 400} {
		x := newH(t)
		fs := &fakeServer{json: `{"error":{"message":"no","type":"server_error"}}`, status: code}
		srv, c := serve(t, x.handler(fs, x.tr))
		resp, _ := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
		if resp.StatusCode != code {
			t.Fatalf("status %d", resp.StatusCode)
		}
		s := x.only()
		if s.FinishReason != "error" || s.ErrorType != strconv.Itoa(code) {
			t.Errorf("%d: finish %q/%q", code, s.FinishReason, s.ErrorType)
		}
		if v, _ := attr(x.span("chat m"), attributes.ErrorType); v.AsString() != strconv.Itoa(code) {
			t.Errorf("%d: error.type %v", code, v)
		}
	}
}

func TestStreamErrorEvent(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{events: []string{chatChunk(`{"content":"a"}`, ""), `{"error":{"message":"engine died","type":"InternalServerError","code":500}}`, "[DONE]"}}
	srv, c := serve(t, x.handler(fs, x.tr))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
	if s := x.only(); s.FinishReason != "error" || s.ErrorType != "stream_error" || s.NumOutputTokens != 1 {
		t.Errorf("finish %q/%q out %d", s.FinishReason, s.ErrorType, s.NumOutputTokens)
	}
}

func TestHandlerPanic(t *testing.T) {
	x := newH(t)
	hd := x.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		panic("handler bug")
	}), x.tr)
	func() {
		defer func() {
			if recover() != "handler bug" {
				t.Error("the panic did not go on")
			}
		}()
		hd.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`)))
	}()
	if s := x.only(); s.FinishReason != "error" || s.ErrorType != "panic" {
		t.Errorf("finish %q/%q", s.FinishReason, s.ErrorType)
	}
}

// TestBodiesReachTheHandlerIntact: whatever the body, the handler reads the
// very bytes the client sent, and the middleware never fails a request. A
// body that names no model is traced as openaihttp.UnknownModel, and the
// root says why.
func TestBodiesReachTheHandlerIntact(t *testing.T) {
	huge := func(prefix string, n int, suffix string) string {
		return prefix + strings.Repeat("x", n) + suffix
	}
	const limit = 4096
	small := []openaihttp.Option{openaihttp.WithMaxBody(2 * limit)}
	for _, c := range []struct {
		name    string
		path    string
		body    string
		opts    []openaihttp.Option
		model   string // "" untraced
		problem string
	}{
		{"valid", "/v1/chat/completions", `{"model":"m","messages":[]}`, nil, "m", ""},
		{"malformed after model", "/v1/chat/completions", `{"model":"m","messages":[}`, nil, "m", ""},
		{"malformed before model", "/v1/chat/completions", `{"messages":[},"model":"m"}`, nil, "unknown", "not_json"},
		{"not json", "/v1/chat/completions", `model=m&stream=true`, nil, "unknown", "not_json"},
		{"json array", "/v1/chat/completions", `[{"model":"m"}]`, nil, "unknown", "not_json"},
		{"model not a string", "/v1/chat/completions", `{"model":42}`, nil, "unknown", "no_model"},
		{"no model", "/v1/chat/completions", `{"messages":[]}`, nil, "unknown", "no_model"},
		{"binary", "/v1/chat/completions", "\x00\xff\xfe{\"model\":\"m\"}", nil, "unknown", "not_json"},
		{"empty", "/v1/chat/completions", ``, nil, "unknown", "not_json"},
		{"over the limit, model first", "/v1/chat/completions", huge(`{"model":"m","stream":false,"messages":[{"role":"user","content":"`, 3*limit, `"}]}`), nil, "m", ""},
		// The OpenAI SDKs' order: the model after the messages.
		{"over the limit, model last", "/v1/chat/completions", huge(`{"messages":[{"role":"user","content":"`, 3*limit, `"}],"model":"m"}`), nil, "m", ""},
		{"over MaxBody, model last", "/v1/chat/completions", huge(`{"messages":[{"role":"user","content":"`, 3*limit, `"}],"model":"m"}`), small, "unknown", "unread"},
		{"over the budget, model last", "/v1/chat/completions", huge(`{"messages":[{"role":"user","content":"`, 3*limit, `"}],"model":"m"}`),
			[]openaihttp.Option{openaihttp.WithBodyBudget(limit)}, "unknown", "unread"},
		{"model too long", "/v1/chat/completions", `{"model":"` + strings.Repeat("m", 5000) + `"}`, nil, "unknown", "model_too_long"},
		{"exactly the limit", "/v1/chat/completions", huge(`{"model":"m","p":"`, limit-len(`{"model":"m","p":"`)-2, `"}`), nil, "m", ""},
		{"over the limit, not json", "/v1/completions", huge("", 5*limit, ""), nil, "unknown", "not_json"},
		{"embeddings", "/v1/embeddings", `{"model":"m","input":"x"}`, nil, "m", ""},
		{"unknown path", "/v1/audio/speech", `{"model":"m","input":"x"}`, nil, "", ""},
		{"health", "/health", `{"model":"m"}`, nil, "", ""},
		{"metrics", "/metrics", `{"model":"m"}`, nil, "", ""},
		{"trailing slash", "/v1/chat/completions/", `{"model":"m"}`, nil, "m", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newH(t)
			fs := &fakeServer{json: `{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}`}
			srv, cl := serve(t, x.handler(fs, x.tr, append([]openaihttp.Option{openaihttp.WithPeekLimit(limit)}, c.opts...)...))
			resp, body := post(t, cl, srv.URL+c.path, c.body)
			if resp.StatusCode != 200 || string(body) != fs.json {
				t.Fatalf("response %d %q", resp.StatusCode, body)
			}
			if fs.gotErr != nil || sha256.Sum256(fs.gotBody) != sha256.Sum256([]byte(c.body)) || fs.gotLen != int64(len(c.body)) {
				t.Fatalf("handler read %d bytes (err %v, Content-Length %d), client sent %d", len(fs.gotBody), fs.gotErr, fs.gotLen, len(c.body))
			}
			if c.model == "" {
				x.none()
				return
			}
			s := x.only()
			if s.Model != c.model {
				t.Errorf("model %q, want %q", s.Model, c.model)
			}
			op := map[string]string{"/v1/completions": "text_completion", "/v1/embeddings": "embeddings"}[c.path]
			if op == "" {
				op = "chat"
			}
			v, ok := attr(x.span(op+" "+c.model), attributes.HTTPRequestBody)
			if c.problem == "" && ok || c.problem != "" && v.AsString() != c.problem {
				t.Errorf("llm.http.request_body %q, want %q", v.AsString(), c.problem)
			}
			if n := x.counter(attributes.MetricRequests); n != 1 {
				t.Errorf("counted %d requests", n)
			}
		})
	}
}

// errBody yields some bytes, then fails.
type errBody struct {
	r   io.Reader
	err error
}

func (b *errBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, b.err
	}
	return n, err
}
func (b *errBody) Close() error { return nil }

func TestBodyReadErrorReachesTheHandler(t *testing.T) {
	x := newH(t)
	boom := errors.New("connection reset mid-body")
	var got []byte
	var gotErr error
	hd := x.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, gotErr = io.ReadAll(r.Body)
	}), x.tr)
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	req.Body = &errBody{r: strings.NewReader(`{"model":"m","messa`), err: boom}
	hd.ServeHTTP(httptest.NewRecorder(), req)
	if string(got) != `{"model":"m","messa` || gotErr != boom {
		t.Errorf("handler read %q, %v", got, gotErr)
	}
}

func TestUntracedPathsGetTheSameRequestAndWriter(t *testing.T) {
	x := newH(t)
	var gotR *http.Request
	var gotW http.ResponseWriter
	hd := x.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { gotR, gotW = r, w }), x.tr)
	for _, c := range []struct{ method, path string }{
		{"GET", "/health"}, {"GET", "/healthz"}, {"GET", "/ready"}, {"GET", "/metrics"},
		{"GET", "/v1/chat/completions"}, {"POST", "/v1/models"}, {"POST", "/"},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(`{"model":"m"}`))
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		if gotR != req || gotW != rec {
			t.Errorf("%s %s: the handler got another request or writer", c.method, c.path)
		}
	}
	x.none()
}

func TestRoutesConfigurable(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{json: `{}`}
	srv, c := serve(t, x.handler(fs, x.tr,
		openaihttp.WithRoute("/openai/v1/chat/completions", "chat"),
		openaihttp.WithRoute("/v1/completions", ""),
		openaihttp.WithRequestID(func(*http.Request) string { return "fixed" }),
		openaihttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
	))
	post(t, c, srv.URL+"/v1/completions", `{"model":"m"}`)
	post(t, c, srv.URL+"/openai/v1/chat/completions", `{"model":"m"}`, "X-Tenant", "acme")
	if s := x.only(); s.RequestID != "fixed" || s.Scope != "acme" {
		t.Errorf("id %q scope %q", s.RequestID, s.Scope)
	}
}

// TestFlushThroughTheWrapper: the client sees a flushed chunk while the
// handler is still running, through http.Flusher and ResponseController.
func TestFlushThroughTheWrapper(t *testing.T) {
	x := newH(t)
	release := make(chan struct{})
	hd := x.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("not a Flusher")
		}
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Errorf("SetWriteDeadline through Unwrap: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+chatChunk(`{"content":"first"}`, "")+"\n\n")
		w.(http.Flusher).Flush()
		<-release // only the flush can get the chunk to the client now
		_, _ = io.WriteString(w, "data: "+chatChunk(`{"content":"second"}`, "stop")+"\n\ndata: [DONE]\n\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
	}), x.tr)
	srv, c := serve(t, hd)
	resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !bytes.Contains(rest, []byte("second")) {
		t.Errorf("rest %q", rest)
	}
	if s := x.only(); s.NumOutputTokens != 2 || s.FinishReason != "stop" {
		t.Errorf("stats %+v", s)
	}
}

func TestHandlerSpansJoinTheTrace(t *testing.T) {
	x := newH(t)
	fs := &fakeServer{json: `{}`}
	fs.onStart = func(w http.ResponseWriter, r *http.Request) {
		_, sp := x.tp.Tracer("handler").Start(r.Context(), "tokenize")
		sp.End()
	}
	srv, c := serve(t, x.handler(fs, x.tr))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
	x.only()
	root, child := x.span("chat m"), x.span("tokenize")
	if child.Parent().SpanID() != root.SpanContext().SpanID() || child.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Error("the handler's span is not under the request's root")
	}
}

func TestIncomingTraceparent(t *testing.T) {
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	trusted := []openaihttp.Option{openaihttp.WithTrustIncomingSampling(true)}
	trustingTracker := []otelstats.Option{otelstats.WithTrustParentSampling(true)}
	for _, c := range []struct {
		name    string
		flags   string
		opts    []openaihttp.Option
		tracker []otelstats.Option
		parent  bool // root is the caller's child
		sampled bool // the trace is kept
	}{
		{"untrusted unsampled", "00", nil, nil, true, true},
		{"untrusted sampled", "01", nil, nil, true, true},
		{"trusted sampled", "01", trusted, trustingTracker, true, true},
		{"trusted unsampled", "00", trusted, trustingTracker, true, false},
		// The middleware tells the tracker per request (Arrival.TrustParent).
		{"trusted unsampled, tracker trusts no parent", "00", trusted, nil, true, false},
		{"untrusted unsampled, trusting tracker", "00", nil, trustingTracker, true, true},
		{"public", "00", []openaihttp.Option{openaihttp.WithPublicEndpointFunc(func(*http.Request) bool { return true })}, trustingTracker, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newH(t, c.tracker...)
			srv, cl := serve(t, x.handler(&fakeServer{json: `{}`}, x.tr, c.opts...))
			post(t, cl, srv.URL+"/v1/chat/completions", `{"model":"m"}`, "traceparent", "00-"+tid+"-"+sid+"-"+c.flags)
			s := x.only()
			if s.Sampled != c.sampled || x.hasSpan("chat m") != c.sampled {
				t.Fatalf("kept %v (%q), spans %v; want kept %v", s.Sampled, s.SamplingReason, x.spanNames(), c.sampled)
			}
			if n := x.counter(attributes.MetricRequests); n != 1 {
				t.Errorf("requests counted %d: metrics count every request, kept or not", n)
			}
			if !c.sampled {
				return
			}
			root := x.span("chat m")
			joined := root.SpanContext().TraceID().String() == tid && root.Parent().SpanID().String() == sid && root.Parent().IsRemote()
			if joined != c.parent {
				t.Errorf("root %v parent %v: joined %v, want %v", root.SpanContext(), root.Parent(), joined, c.parent)
			}
			if s.TraceID != root.SpanContext().TraceID().String() {
				t.Errorf("stats trace id %s", s.TraceID)
			}
		})
	}
}

// A trusted caller may ask for a detail level; an untrusted one may not.
func TestDetailHeaderOnlyWhenTrusted(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []openaihttp.Option
		spans int
	}{
		{"untrusted asks for level 0", nil, 3},
		{"trusted asks for level 0", []openaihttp.Option{openaihttp.WithTrustIncomingSampling(true)}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newH(t)
			srv, cl := serve(t, x.handler(&fakeServer{json: `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`}, x.tr, c.opts...))
			post(t, cl, srv.URL+"/v1/chat/completions", `{"model":"m"}`, openaihttp.DetailHeader, "0")
			x.only()
			if n := len(x.spanNames()); (n == 1) != (c.spans == 1) {
				t.Fatalf("spans %v, want %d", x.spanNames(), c.spans)
			}
		})
	}
}
