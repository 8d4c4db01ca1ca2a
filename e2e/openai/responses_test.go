package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// scripted is an upstream that answers each path with a fixed body, as
// OpenAI's API shapes it: SSE events with their event: lines, or JSON.
type scripted struct {
	ctype string
	body  string
}

// scriptedProxy is openaihttp's proxy, in process, in front of an upstream
// answering with script, and an SDK client of it.
type scriptedProxy struct {
	client openai.Client
	raw    *recorder
	mu     sync.Mutex
	stats  []otelstats.RequestStats
	fin    chan struct{}
}

func newScriptedProxy(t *testing.T, script scripted) *scriptedProxy {
	t.Helper()
	sp := &scriptedProxy{raw: &recorder{}, fin: make(chan struct{}, 8)}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", script.ctype)
		if script.ctype != "text/event-stream" {
			_, _ = io.WriteString(w, script.body)
			return
		}
		for _, ev := range strings.SplitAfter(script.body, "\n\n") {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	tr, err := otelstats.NewTracker(otelstats.WithAutoSweep(100*time.Millisecond),
		otelstats.WithOnFinish(func(st *otelstats.RequestStats) {
			sp.mu.Lock()
			sp.stats = append(sp.stats, *st)
			sp.mu.Unlock()
			sp.fin <- struct{}{}
		}))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	p, err := openaihttp.NewProxy(u, tr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	hc := srv.Client()
	sp.client = openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test"), option.WithHTTPClient(hc),
		option.WithMaxRetries(0), option.WithMiddleware(sp.raw.middleware))
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
		p.CloseIdleConnections()
		up.Close()
		_ = tr.Shutdown(context.Background())
	})
	return sp
}

func (sp *scriptedProxy) only(t *testing.T) otelstats.RequestStats {
	t.Helper()
	select {
	case <-sp.fin:
	case <-time.After(5 * time.Second):
		t.Fatal("no request finished")
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if len(sp.stats) != 1 {
		t.Fatalf("%d requests finished", len(sp.stats))
	}
	return sp.stats[0]
}

// sse renders events as OpenAI sends them: each with its event: line.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		var head struct {
			Type string `json:"type"`
		}
		if json.Unmarshal([]byte(e), &head) == nil && head.Type != "" {
			b.WriteString("event: " + head.Type + "\n")
		}
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

func responseObject(status, extra string) string {
	return `{"id":"resp_1","object":"response","created_at":1,"status":"` + status + `","error":null,"incomplete_details":null,` +
		`"model":"gpt-x","output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],` + extra + `}`
}

// responsesStream is a Responses API stream of the given deltas, ending
// with final (its last event).
func responsesStream(deltaType string, deltas []string, final string) string {
	ev := []string{
		`{"type":"response.created","sequence_number":0,"response":` + responseObject("in_progress", `"usage":null`) + `}`,
		`{"type":"response.in_progress","sequence_number":1,"response":` + responseObject("in_progress", `"usage":null`) + `}`,
		`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
	}
	for i, d := range deltas {
		b, _ := json.Marshal(d)
		ev = append(ev, `{"type":"`+deltaType+`","sequence_number":`+itoa(3+i)+`,"item_id":"msg_1","output_index":0,"content_index":0,"delta":`+string(b)+`,"logprobs":[]}`)
	}
	return sse(append(ev, final)...)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestSDKResponsesThroughProxy: Responses API streams, shaped as OpenAI's,
// reach the SDK unchanged through the proxy, and each ends as the SDK saw
// it: completed, incomplete at max_output_tokens, failed, an error event.
func TestSDKResponsesThroughProxy(t *testing.T) {
	const usage = `"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":4},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":17}`
	for _, tc := range []struct {
		name, deltaType, final string
		finish, errType        string
		out                    int
	}{
		{"completed", "response.output_text.delta",
			`{"type":"response.completed","sequence_number":9,"response":` + responseObject("completed", usage) + `}`, "stop", "", 5},
		{"incomplete", "response.output_text.delta",
			`{"type":"response.incomplete","sequence_number":9,"response":` + strings.Replace(responseObject("incomplete", usage), `"incomplete_details":null`, `"incomplete_details":{"reason":"max_output_tokens"}`, 1) + `}`,
			"length", "", 5},
		{"failed", "response.output_text.delta",
			`{"type":"response.failed","sequence_number":9,"response":` + strings.Replace(responseObject("failed", `"usage":null`), `"error":null`, `"error":{"code":"server_error","message":"boom"}`, 1) + `}`,
			"error", openaihttp.ErrorResponseFailed, 3},
		{"error event", "response.output_text.delta",
			`{"type":"error","sequence_number":9,"code":"server_error","message":"boom","param":null}`, "error", openaihttp.ErrorStream, 3},
		{"function call", "response.function_call_arguments.delta",
			`{"type":"response.completed","sequence_number":9,"response":` + responseObject("completed", usage) + `}`, "stop", "", 5},
		{"custom tool input", "response.custom_tool_call_input.delta",
			`{"type":"response.completed","sequence_number":9,"response":` + responseObject("completed", usage) + `}`, "stop", "", 5},
		{"mcp arguments", "response.mcp_call_arguments.delta",
			`{"type":"response.completed","sequence_number":9,"response":` + responseObject("completed", usage) + `}`, "stop", "", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := responsesStream(tc.deltaType, []string{"Hel", "lo", " world"}, tc.final)
			sp := newScriptedProxy(t, scripted{"text/event-stream", body})
			st := sp.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
				Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			var text, last string
			for st.Next() {
				ev := st.Current()
				last = ev.Type
				if ev.Type == tc.deltaType {
					text += ev.Delta
				}
			}
			_ = st.Close()
			if last == "" || text != "Hello world" {
				t.Fatalf("SDK read %q, last event %q (err %v)", text, last, st.Err())
			}
			if got := string(sp.raw.last()); got != body {
				t.Errorf("SDK received a different stream:\n%s\n---\n%s", got, body)
			}
			s := sp.only(t)
			if s.FinishReason != tc.finish || s.ErrorType != tc.errType || s.NumOutputTokens != tc.out || !s.FirstTokenLatency.Valid {
				t.Errorf("finish %q/%q (want %q/%q), %d output tokens (want %d), TTFT valid %v", s.FinishReason, s.ErrorType,
					tc.finish, tc.errType, s.NumOutputTokens, tc.out, s.FirstTokenLatency.Valid)
			}
			if tc.errType == "" && (s.NumPromptTokens.N != 12 || !s.NumPromptTokens.Valid) {
				t.Errorf("prompt %+v, want 12", s.NumPromptTokens)
			}
		})
	}
}

// TestSDKOneShotThroughProxy: responses in one piece — the Responses API,
// legacy completions, chat with tool calls, embeddings — as the SDK decodes
// them, and as the proxy records them: counted, with no token times.
func TestSDKOneShotThroughProxy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body  string
		call        func(c openai.Client) (string, error) // the finish the SDK saw
		finish      string
		prompt, out int
	}{
		{"responses", strings.Replace(responseObject("incomplete",
			`"usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":23}`),
			`"incomplete_details":null`, `"incomplete_details":{"reason":"max_output_tokens"}`, 1),
			func(c openai.Client) (string, error) {
				r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
				if err != nil {
					return "", err
				}
				if r.IncompleteDetails.Reason != "max_output_tokens" {
					return string(r.IncompleteDetails.Reason), nil
				}
				return "length", nil // the finish reason the layer records for it
			}, "length", 7, 16},
		{"completions", `{"id":"cmpl-1","object":"text_completion","created":1,"model":"gpt-x","choices":[{"index":0,"text":"a b","logprobs":null,"finish_reason":"stop"},{"index":1,"text":"c d e","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":8,"total_tokens":11}}`,
			func(c openai.Client) (string, error) {
				r, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-x", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("p")}, N: openai.Int(2)})
				if err != nil {
					return "", err
				}
				return string(r.Choices[1].FinishReason), nil
			}, "length", 3, 8},
		{"chat tool calls", `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`,
			func(c openai.Client) (string, error) {
				r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-x", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
				if err != nil {
					return "", err
				}
				return string(r.Choices[0].FinishReason), nil
			}, "tool_calls", 20, 9},
		{"embeddings", `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2]}],"model":"emb","usage":{"prompt_tokens":5,"total_tokens":5}}`,
			func(c openai.Client) (string, error) {
				_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "emb", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
				return "stop", err
			}, "stop", 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newScriptedProxy(t, scripted{"application/json", tc.body})
			fin, err := tc.call(sp.client)
			if err != nil || fin != tc.finish {
				t.Fatalf("SDK: finish %q, err %v", fin, err)
			}
			s := sp.only(t)
			if s.FinishReason != tc.finish || s.ErrorType != "" || s.NumOutputTokens != tc.out || s.NumPromptTokens.N != tc.prompt ||
				s.FirstTokenLatency.Valid || !s.E2ELatency.Valid {
				t.Errorf("stats: finish %q/%q, tokens %+v/%d, TTFT valid %v", s.FinishReason, s.ErrorType, s.NumPromptTokens,
					s.NumOutputTokens, s.FirstTokenLatency.Valid)
			}
		})
	}
}

// TestSDKLegacyCompletionsStream: legacy completions streamed with n=2,
// each choice's text and finish reason by its index, as the SDK reads
// them; the proxy counts the chunks with text and ends at the last
// choice's finish.
func TestSDKLegacyCompletionsStream(t *testing.T) {
	chunk := func(i int, text, fin string) string {
		f := "null"
		if fin != "" {
			f = `"` + fin + `"`
		}
		return `{"id":"cmpl-1","object":"text_completion","created":1,"model":"gpt-x","choices":[{"index":` + itoa(i) + `,"text":"` + text + `","logprobs":null,"finish_reason":` + f + `}]}`
	}
	body := sse(chunk(0, "a", ""), chunk(1, "b", ""), chunk(0, " c", "length"), chunk(1, " d", ""), chunk(1, "", "stop"), "[DONE]")
	sp := newScriptedProxy(t, scripted{"text/event-stream", body})
	st := sp.client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "gpt-x",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("p")}, N: openai.Int(2)})
	texts, fins := map[int64]string{}, map[int64]string{}
	for st.Next() {
		for _, c := range st.Current().Choices {
			texts[c.Index] += c.Text
			if c.FinishReason != "" {
				fins[c.Index] = string(c.FinishReason)
			}
		}
	}
	if err := st.Err(); err != nil || texts[0] != "a c" || texts[1] != "b d" || fins[0] != "length" || fins[1] != "stop" {
		t.Fatalf("SDK read %v %v (err %v)", texts, fins, err)
	}
	_ = st.Close()
	s := sp.only(t)
	if s.FinishReason != "stop" || s.ErrorType != "" || s.NumOutputTokens != 4 || !s.FirstTokenLatency.Valid {
		t.Errorf("stats: finish %q/%q, %d output tokens, TTFT valid %v", s.FinishReason, s.ErrorType, s.NumOutputTokens, s.FirstTokenLatency.Valid)
	}
}
