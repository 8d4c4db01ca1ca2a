package openaihttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// truncatedOf is llm.attributes.truncated for key.
func truncatedOf(m map[string]metricdata.Aggregation, key attribute.Key) int64 {
	sum, _ := m[attributes.MetricAttributesTruncated].(metricdata.Sum[int64])
	var n int64
	for _, p := range sum.DataPoints {
		if v, _ := p.Attributes.Value(attributes.TruncatedKey); v.AsString() == string(key) {
			n += p.Value
		}
	}
	return n
}

// TestCaptureLongPrompt: with content capture on, a prompt longer than the
// layer keeps (64 KiB of JSON) is recorded cut at that size, on a UTF-8
// boundary and never inside an escape, and the cut is counted — not
// dropped. The SDKs' order (the model after the messages) and the model
// first (the middleware then stops reading at its peek limit) both keep
// the prompt's head.
func TestCaptureLongPrompt(t *testing.T) {
	const start = "PROMPTSTART"
	for _, tc := range []struct {
		name, path string
		pad        string // repeated to make the prompt long
		size       int    // of the prompt's padding
		modelLast  bool
		input      bool // the Responses API's string input, not messages
		max        int  // the tracker's cap
		head       int  // the least the layer keeps, when max is larger
		cut        bool
	}{
		{"messages 60 KB", "/v1/chat/completions", "x", 60_000, false, false, 2048, 0, false},
		{"messages 70 KiB", "/v1/chat/completions", "x", 70 << 10, false, false, 2048, 0, true},
		{"messages 70 KiB, model last", "/v1/chat/completions", "x", 70 << 10, true, false, 2048, 0, true},
		{"messages 5 MiB", "/v1/chat/completions", "x", 5 << 20, false, false, 2048, 0, true},
		{"messages 5 MiB, model last", "/v1/chat/completions", "x", 5 << 20, true, false, 2048, 0, true},
		{"input 70 KiB", "/v1/responses", "x", 70 << 10, false, true, 2048, 0, true},
		{"input 60 KB", "/v1/responses", "x", 60_000, true, true, 2048, 0, false},
		{"messages of runes, whole head", "/v1/chat/completions", "é", 70 << 10, true, false, 1 << 20, 60_000, true},
		{"input of runes, whole head", "/v1/responses", "é", 70 << 10, false, true, 1 << 20, 60_000, true},
		// 20 bytes of JSON for 7 of text: \n, é, and 😀 as a surrogate pair.
		{"input of escapes, whole head", "/v1/responses", `\n\u00e9\ud83d\ude00`, 70 << 10, true, true, 1 << 20, 20_000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := start + strings.Repeat(tc.pad, tc.size/len(tc.pad))
			var text string // the prompt as text
			if err := json.Unmarshal([]byte(`"`+prompt+`"`), &text); err != nil {
				t.Fatal(err)
			}
			field := `"messages":[{"role":"user","content":"` + prompt + `"}]`
			if tc.input {
				field = `"input":"` + prompt + `"`
			}
			body := `{"model":"m","stream":true,` + field + `}`
			if tc.modelLast {
				body = `{"stream":true,` + field + `,"model":"m"}`
			}
			opts := []otelstats.Option{otelstats.WithContentCapture(&otelstats.ContentCapture{MaxBytes: tc.max})}
			eachSide(t, streamOf("OUT"), opts, func(t *testing.T, sd side) {
				resp, err := http.Post(sd.url+tc.path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s := sd.stats()
				in, _ := attrMap(sd.root(s).Attributes())[string(attributes.InputMessages)].(string)
				texts := messageTexts(t, in)
				if len(texts) != 1 || !strings.HasPrefix(texts[0], start) || len(in) > tc.max {
					t.Fatalf("%s: %d bytes %.60q…, want the prompt's text within %d bytes", attributes.InputMessages, len(in), in, tc.max)
				}
				got := strings.TrimSuffix(texts[0], "…[truncated]")
				if !strings.HasPrefix(text, got) || strings.ContainsRune(got, utf8.RuneError) {
					t.Errorf("%s is not the prompt's clean head: …%q", attributes.InputMessages, got[max(len(got)-16, 0):])
				}
				if len(got) < tc.head {
					t.Errorf("%s kept %d bytes of the prompt, want its 64 KiB head", attributes.InputMessages, len(got))
				}
				if n := truncatedOf(sd.metrics(), attributes.InputMessages); n != map[bool]int64{true: 1}[tc.cut] {
					t.Errorf("the cut counted %d times, want it once if cut (%v)", n, tc.cut)
				}
			})
		})
	}
}

// TestCaptureToolCallsAndResponses: with capture on, both sides record a
// streamed chat answer that calls a tool (its arguments streamed in
// pieces), and a whole Responses API answer (its output items), as the
// conventions' output messages; a whole chat answer's tool calls too.
func TestCaptureToolCallsAndResponses(t *testing.T) {
	toolStream := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	}
	for _, tc := range []struct {
		name, path, body string
		up               http.HandlerFunc
		want             string
	}{
		{"streamed tool call", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}]}`,
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for _, c := range toolStream {
					_, _ = io.WriteString(w, "data: "+c+"\n\n")
				}
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
			},
			`[{"role":"assistant","parts":[{"type":"tool_call","id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}],"finish_reason":"tool_call"}]`},
		{"whole responses answer", "/v1/responses", `{"model":"m","input":"hi"}`,
			func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[`+
					`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"greet"}]},`+
					`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hello!","annotations":[]}]}],`+
					`"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}`)
			},
			`[{"role":"assistant","parts":[{"type":"reasoning","content":"greet"},{"type":"text","content":"Hello!"}],"finish_reason":"stop"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []otelstats.Option{otelstats.WithContentCapture(&otelstats.ContentCapture{})}
			eachSide(t, tc.up, opts, func(t *testing.T, sd side) {
				resp, err := http.Post(sd.url+tc.path, "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s := sd.stats()
				out, _ := attrMap(sd.root(s).Attributes())[string(attributes.OutputMessages)].(string)
				if out != tc.want {
					t.Errorf("%s\n got %s\nwant %s", attributes.OutputMessages, out, tc.want)
				}
			})
		})
	}
}
