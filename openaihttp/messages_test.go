package openaihttp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// TestCloseCut: a JSON value cut anywhere becomes JSON again, keeping what
// it held whole up to the cut.
func TestCloseCut(t *testing.T) {
	whole := `{"role":"user","content":[{"type":"text","text":"héllo \"w\" \u00e9 \ud83d\ude00"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}],"name":"bob"}`
	for n := 1; n < len(whole); n++ {
		got := closeCut([]byte(whole[:n]))
		if got != nil && !json.Valid(got) {
			t.Fatalf("cut at %d: %s is no JSON", n, got)
		}
		if n > len(`{"role":"user",`) && got == nil {
			t.Errorf("cut at %d: nothing kept of %s", n, whole[:n])
		}
	}
	if got := string(closeCut([]byte(`{"role":"user","content":"abc\u00`))); got != `{"role":"user","content":"abc"}` {
		t.Errorf("cut in an escape: %s", got)
	}
}

func FuzzCloseCut(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":"c\"`))
	f.Add([]byte(`[{"role":"user","content":"x`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := closeCut(b); got != nil && !json.Valid(got) {
			t.Fatalf("%q became %q", b, got)
		}
		inputMessages(reqMessages, b)
		inputMessages(reqInput, b)
		var o outputCapture
		o.add(b)
		o.messages()
	})
}

// TestInputMessages: what OpenAI's SDKs send as chat messages, completion
// prompts and Responses API input, as the conventions' messages.
func TestInputMessages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field int
		raw   string
		want  string // the messages as otelstats writes them
	}{
		{"chat text", reqMessages, `[{"role":"system","content":"be brief"},{"role":"user","content":"hi","name":"bob"}]`,
			`[{"role":"system","parts":[{"type":"text","content":"be brief"}]},{"role":"user","name":"bob","parts":[{"type":"text","content":"hi"}]}]`},
		{"chat parts", reqMessages, `[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"low"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}}]}]`,
			`[{"role":"user","parts":[{"type":"text","content":"what is this?"},{"type":"uri","modality":"image","uri":"https://x/a.png"},{"type":"blob","modality":"image","mime_type":"image/png","content":"iVBOR"},{"type":"blob","modality":"audio","mime_type":"audio/wav","content":"UklG"}]}]`},
		{"chat tools", reqMessages, `[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"rainy"}]`,
			`[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"}]},{"role":"tool","parts":[{"type":"tool_call_response","id":"c1","response":"rainy"}]}]`},
		{"chat reasoning history", reqMessages, `[{"role":"assistant","content":"4","reasoning_content":"2+2"}]`,
			`[{"role":"assistant","parts":[{"type":"reasoning","content":"2+2"},{"type":"text","content":"4"}]}]`},
		{"prompt list", reqPrompt, `["a","b",[1,2,3]]`,
			`[{"role":"user","parts":[{"type":"text","content":"a"}]},{"role":"user","parts":[{"type":"text","content":"b"}]}]`},
		{"responses items", reqInput, `[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://x/b.jpg"}]},{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c2","output":"ok"}]`,
			`[{"role":"user","parts":[{"type":"text","content":"hi"},{"type":"uri","modality":"image","uri":"https://x/b.jpg"}]},{"role":"assistant","parts":[{"type":"tool_call","id":"c2","name":"f","arguments":"{}"}]},{"role":"tool","parts":[{"type":"tool_call_response","id":"c2","response":"ok"}]}]`},
		{"chat cut in the second message", reqMessages, `[{"role":"system","content":"be brief"},{"role":"user","content":"hello wor`,
			`[{"role":"system","parts":[{"type":"text","content":"be brief"}]},{"role":"user","parts":[{"type":"text","content":"hello wor"}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := marshal(t, inputMessages(tc.field, []byte(tc.raw)), ""); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestOutputCapture: a stream's deltas and a whole response become one
// message per choice, in index order: reasoning, text and tool calls,
// with the choice's finish reason.
func TestOutputCapture(t *testing.T) {
	stream := []string{
		`{"choices":[{"index":1,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"think"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"}},{"index":1,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo"}},{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}`,
		`{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3}}`,
	}
	var o outputCapture
	for _, c := range stream {
		o.add([]byte(c))
	}
	want := `[{"role":"assistant","parts":[{"type":"reasoning","content":"think"},{"type":"text","content":"Hello"}],"finish_reason":"stop"},{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"f","arguments":"{\"a\":1}"}],"finish_reason":"tool_call"}]`
	if got := marshal(t, o.messages(), ""); got != want {
		t.Errorf("stream:\n got %s\nwant %s", got, want)
	}
	var whole outputCapture
	whole.add([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`))
	want = `[{"role":"assistant","parts":[{"type":"tool_call","id":"a","name":"f","arguments":"{}"},{"type":"tool_call","id":"b","name":"g","arguments":"{}"}],"finish_reason":"tool_call"}]`
	if got := marshal(t, whole.messages(), ""); got != want {
		t.Errorf("whole:\n got %s\nwant %s", got, want)
	}
	var resp outputCapture
	for _, e := range []string{`{"type":"response.reasoning_text.delta","delta":"hm"}`, `{"type":"response.output_text.delta","delta":"Hi"}`} {
		resp.add([]byte(e))
	}
	if got, want := marshal(t, resp.messages(), "stop"), `[{"role":"assistant","parts":[{"type":"reasoning","content":"hm"},{"type":"text","content":"Hi"}],"finish_reason":"stop"}]`; got != want {
		t.Errorf("responses:\n got %s\nwant %s", got, want)
	}
}

// TestOutputCaptureBounded: past the choices kept, a Responses API event
// or output item for choice 0 is dropped, not a crash; a huge finish
// reason or role is not kept.
func TestOutputCaptureBounded(t *testing.T) {
	var o outputCapture
	var b strings.Builder
	b.WriteString(`{"choices":[`)
	for i := 1; i <= maxChoicesKept; i++ {
		if i > 1 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"index":%d,"delta":{"content":"x","role":"%s"},"finish_reason":"%s"}`, i, strings.Repeat("r", 1000), strings.Repeat("f", 1000))
	}
	b.WriteString(`]}`)
	o.add([]byte(b.String()))
	o.add([]byte(`{"type":"response.output_text.delta","delta":"hi"}`))
	o.addItems([]byte(`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}]`))
	msgs := o.messages()
	if len(msgs) != maxChoicesKept {
		t.Fatalf("%d messages, want %d", len(msgs), maxChoicesKept)
	}
	if m := msgs[0]; len(m.Role) > maxNameLen || len(m.FinishReason) > maxNameLen {
		t.Errorf("role of %d bytes, finish reason of %d kept", len(m.Role), len(m.FinishReason))
	}
}

// marshal writes msgs as a tracker capturing content writes them: its
// root's gen_ai.input.messages, or gen_ai.output.messages when the request
// finishes with reason.
func marshal(t *testing.T, msgs []otelstats.Message, reason string) string {
	t.Helper()
	h := newCaptureHarness(t)
	q := h.arrive()
	if reason == "" {
		q.RecordMessages(msgs, nil)
		return h.finish(q, "stop", true)
	}
	q.RecordMessages(nil, msgs)
	return h.finish(q, reason, false)
}

type captureHarness struct {
	t   *testing.T
	rec *tracetest.SpanRecorder
	tr  *otelstats.Tracker
}

func newCaptureHarness(t *testing.T) *captureHarness {
	rec := tracetest.NewSpanRecorder()
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))),
		otelstats.WithContentCapture(&otelstats.ContentCapture{MaxBytes: 1 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return &captureHarness{t: t, rec: rec, tr: tr}
}

func (h *captureHarness) arrive() *otelstats.Request {
	q, err := h.tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: time.Now(), Model: "m"})
	if err != nil {
		h.t.Fatal(err)
	}
	return q
}

// finish ends q and returns its root's input (or output) messages.
func (h *captureHarness) finish(q *otelstats.Request, reason string, input bool) string {
	if err := q.Finish(time.Now(), reason); err != nil {
		h.t.Fatal(err)
	}
	key := attributes.OutputMessages
	if input {
		key = attributes.InputMessages
	}
	for _, s := range h.rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == key {
				return kv.Value.AsString()
			}
		}
	}
	return ""
}
