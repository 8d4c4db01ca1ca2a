package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// The cached prompt tokens of the response's usage reach the root's
// gen_ai.usage.cache_read.input_tokens when no engine reports its own:
// chat/completions' prompt_tokens_details and the Responses API's
// input_tokens_details, streamed or not, through the middleware or the
// proxy. They are not the engine's prefix-cache hits.
func TestUsageCachedTokens(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		fs               *fakeServer
		want             int64
	}{
		{"chat-json", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			&fakeServer{json: `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":20,"completion_tokens":2,"total_tokens":22,"prompt_tokens_details":{"cached_tokens":16}}}`}, 16},
		{"chat-stream", "/v1/chat/completions", chatBody,
			&fakeServer{events: chatStream([]string{"a", "b"}, "stop", `{"prompt_tokens":17,"completion_tokens":2,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":4}}`)}, 4},
		{"responses-json", "/v1/responses", `{"model":"m","input":"hi"}`,
			&fakeServer{json: `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[],` +
				`"usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11,"input_tokens_details":{"cached_tokens":0}}}`}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newH(t)
			srv, c := serve(t, x.handler(tc.fs, x.tr))
			post(t, c, srv.URL+tc.path, tc.body)
			s := x.only()
			if !s.NumCachedTokens.Valid || int64(s.NumCachedTokens.N) != tc.want || !s.CachedFromUsage {
				t.Errorf("cached %+v (from usage %v), want %d", s.NumCachedTokens, s.CachedFromUsage, tc.want)
			}
			root := x.rec.Ended()[0]
			for _, sp := range x.rec.Ended() {
				if !sp.Parent().IsValid() {
					root = sp
				}
			}
			if v, ok := attr(root, attributes.UsageCacheReadInput); !ok || v.AsInt64() != tc.want {
				t.Errorf("root cache_read.input_tokens = %v (%v), want %d", v.AsInterface(), ok, tc.want)
			}
			if n := x.counter("llm.server.prefix_cache.hits"); n != 0 {
				t.Errorf("prefix-cache hits %d, want none from a usage", n)
			}
		})
	}
}

func TestProxyUsageCachedTokens(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":30,"completion_tokens":1,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":24}}}`)
	}), nil)
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	if !s.NumCachedTokens.Valid || s.NumCachedTokens.N != 24 {
		t.Errorf("cached %+v, want 24 from the usage", s.NumCachedTokens)
	}
	root := h.spansOf(s.TraceID)["chat m"][0]
	if v, ok := attr(root, attributes.UsageCacheReadInput); !ok || v.AsInt64() != 24 {
		t.Errorf("root cache_read.input_tokens = %v (%v), want 24", v.AsInterface(), ok)
	}
}

// n > 1: the root's gen_ai.response.finish_reasons has every choice's
// reason in choice order; the request's finish reason (llm.finish_reason
// on the metrics) is the one of the choice that finished last.
func TestChoicesFinishReasons(t *testing.T) {
	nChunk := func(i int, delta, finish string) string {
		fr := "null"
		if finish != "" {
			fr = `"` + finish + `"`
		}
		return `{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":` + string(rune('0'+i)) + `,"delta":` + delta + `,"finish_reason":` + fr + `}]}`
	}
	for _, tc := range []struct {
		name, body string
		fs         *fakeServer
		want       []string
		wantLast   string
	}{
		{"json", `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`,
			&fakeServer{json: `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[` +
				`{"index":0,"message":{"content":"a long"},"finish_reason":"length"},{"index":1,"message":{"content":"b"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14}}`},
			[]string{"length", "stop"}, "stop"},
		// Choice 1 finishes first: the list stays in choice order.
		{"stream", `{"model":"m","n":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			&fakeServer{events: []string{
				nChunk(0, `{"content":"a"}`, ""), nChunk(1, `{"content":"b"}`, ""),
				nChunk(1, `{}`, "stop"), nChunk(0, `{"content":"c"}`, ""), nChunk(0, `{}`, "length"), "[DONE]"}},
			[]string{"length", "stop"}, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newH(t)
			srv, c := serve(t, x.handler(tc.fs, x.tr))
			post(t, c, srv.URL+"/v1/chat/completions", tc.body)
			s := x.only()
			if s.FinishReason != tc.wantLast || !slices.Equal(s.FinishReasons, tc.want) {
				t.Errorf("finish %q, reasons %q; want %q, %q", s.FinishReason, s.FinishReasons, tc.wantLast, tc.want)
			}
			root := x.span("chat m")
			if v, _ := attr(root, attributes.FinishReasons); !slices.Equal(v.AsStringSlice(), tc.want) {
				t.Errorf("gen_ai.response.finish_reasons = %q, want %q", v.AsStringSlice(), tc.want)
			}
			if n := x.counter("llm.server.requests", attribute.String(string(attributes.FinishReason), tc.wantLast)); n != 1 {
				t.Errorf("llm.server.requests{llm.finish_reason=%s} = %d, want 1", tc.wantLast, n)
			}
		})
	}
}

// A usage whose counts are integral floats ("completion_tokens": 12.0, as
// some servers write them) is read, and the chunk that carries it too; a
// count that is no integer is ignored, not the chunk.
func TestUsageFloatCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fs     *fakeServer
		body   string
		prompt int
		out    int
		reason string
	}{
		{"stream", &fakeServer{events: []string{
			chatChunk(`{"content":"a"}`, ""),
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}],` +
				`"usage":{"prompt_tokens":17.0,"completion_tokens":1.2e1,"total_tokens":29.0,"prompt_tokens_details":{"cached_tokens":4.5}}}`,
			"[DONE]"}}, chatBody, 17, 12, "length"},
		{"json", &fakeServer{json: `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"length"}],` +
			`"usage":{"prompt_tokens":20.0,"completion_tokens":3.0,"total_tokens":23.0}}`}, `{"model":"m","messages":[]}`, 20, 3, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newH(t)
			srv, c := serve(t, x.handler(tc.fs, x.tr))
			post(t, c, srv.URL+"/v1/chat/completions", tc.body)
			s := x.only()
			if s.FinishReason != tc.reason || s.NumPromptTokens.N != tc.prompt || s.NumOutputTokens != tc.out {
				t.Errorf("finish %q, %d prompt, %d out; want %q, %d, %d", s.FinishReason, s.NumPromptTokens.N, s.NumOutputTokens, tc.reason, tc.prompt, tc.out)
			}
			if s.NumCachedTokens.Valid {
				t.Errorf("a fractional cached count read as %d", s.NumCachedTokens.N)
			}
		})
	}
}
