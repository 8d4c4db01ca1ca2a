package otelhttpmw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

func ptr[T any](v T) *T { return &v }

func TestParseOpenAIBody(t *testing.T) {
	for _, c := range []struct {
		body string
		want requestInfo
	}{
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, requestInfo{Model: "m", Stream: true, IncludeUsage: true}},
		{`{"model":"m","temperature":0,"top_p":1,"top_k":40,"max_tokens":10,"seed":-1,"n":2,"frequency_penalty":0.1,"presence_penalty":0.2,"stop":"###"}`,
			requestInfo{Model: "m", Sampling: otelstats.SamplingParams{Temperature: ptr(0.0), TopP: ptr(1.0), TopK: ptr[int64](40), MaxTokens: ptr[int64](10),
				Seed: ptr[int64](-1), N: ptr[int64](2), FrequencyPenalty: ptr(0.1), PresencePenalty: ptr(0.2), Stop: []string{"###"}}}},
		// The newest max-tokens name wins.
		{`{"model":"m","max_tokens":10,"max_completion_tokens":20}`, requestInfo{Model: "m", Sampling: otelstats.SamplingParams{MaxTokens: ptr[int64](20)}}},
		{`{"model":"m","max_output_tokens":30}`, requestInfo{Model: "m", Sampling: otelstats.SamplingParams{MaxTokens: ptr[int64](30)}}},
		// Ill-typed fields cost themselves only.
		{`{"model":"m","temperature":"hot","max_tokens":1.5,"stream":"yes","stop":[1,2],"n":null}`, requestInfo{Model: "m"}},
		{`{"model":["m"],"stream":true}`, requestInfo{Stream: true}},
		// Duplicate keys: the last wins, as in encoding/json; so does case.
		{`{"model":"a","model":"b"}`, requestInfo{Model: "b"}},
		{`{"MODEL":"a"}`, requestInfo{Model: "a"}},
		// Truncated: the fields before the cut.
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"abc`, requestInfo{Model: "m", Stream: true}},
		{`{"stream":true,"model":"m`, requestInfo{Stream: true}},
		// Malformed after the model.
		{`{"model":"m","messages":[}`, requestInfo{Model: "m"}},
		{`not json`, requestInfo{}},
		{``, requestInfo{}},
		{`[]`, requestInfo{}},
		{`{"stop":["a","","b","c","d","e","f","g","h","i","j"]}`, requestInfo{Sampling: otelstats.SamplingParams{Stop: []string{"a", "b", "c", "d", "e", "f", "g", "h"}}}},
	} {
		got := parseOpenAIBody([]byte(c.body))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("parse(%s)\n got %+v\nwant %+v", c.body, got, c.want)
		}
	}
	long := `{"stop":"` + strings.Repeat("é", 100) + `"}`
	if s := parseOpenAIBody([]byte(long)).Sampling.Stop[0]; len(s) > maxStopLength || !utf8.ValidString(s) {
		t.Errorf("long stop clipped to %d bytes, valid %v", len(s), utf8.ValidString(s))
	}
}

// FuzzParseOpenAIBody: any body parses without panicking; a body and any
// prefix of it never disagree on a field both know; what lands on spans
// stays bounded.
func FuzzParseOpenAIBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"top_p":0.9,"max_tokens":256,"seed":42,"n":1,"frequency_penalty":0,"presence_penalty":0,"stop":["\n\n"]}`,
		`{"model":"gpt2","prompt":"Once upon","max_tokens":16,"stream":false,"stop":"."}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"max_output_tokens":100,"stream":true}`,
		`{"model":"m","messages":[}`,
		`{"model":"m","max_completion_tokens":1e3,"top_k":-1}`,
		`{"model":"\u00e9\ud83d\ude00","stop":["\u0000"]}`,
		`{"model":"a","model":"b","Model":"c"}`,
		`{"messages":[{"content":"` + strings.Repeat("x", 300) + `"}],"model":"m"}`,
		`{`, `}`, `[`, `"model"`, `null`, ``, "\xff\xfe", `{"model":"m"}garbage`, `{"a":{"b":{"c":[[[[{}]]]]}},"model":"m"}`,
	} {
		f.Add([]byte(s), len(s)/2)
	}
	f.Fuzz(func(t *testing.T, body []byte, cut int) {
		full := parseOpenAIBody(body)
		if cut < 0 || cut > len(body) {
			cut = len(body)
		}
		prefix := parseOpenAIBody(body[:cut])
		if p := full.Sampling.Stop; len(p) > maxStopSequences {
			t.Fatalf("%d stop sequences", len(p))
		}
		for _, s := range append(full.Sampling.Stop, prefix.Sampling.Stop...) {
			if len(s) > maxStopLength || s == "" {
				t.Fatalf("stop %q", s)
			}
		}
		// A whole, valid object with ASCII keys: both paths agree.
		if json.Valid(body) && isASCII(body) {
			if scanned := scanFields(body); !reflect.DeepEqual(scanned.info(), full) {
				t.Fatalf("scan %+v, unmarshal %+v", scanned.info(), full)
			}
		}
		// A prefix knows a field only if the whole body has it too, unless
		// a later duplicate overrides it.
		if prefix.Model != "" && full.Model == "" && json.Valid(body) && isASCII(body) {
			t.Fatalf("prefix found model %q the whole body has not", prefix.Model)
		}
	})
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func newTestTrace(t testing.TB, tr *otelstats.Tracker, n int, stream, expectUsage bool) *reqTrace {
	q, err := tr.Arrive(context.Background(), fmt.Sprint("r", n), otelstats.Arrival{Time: time.Now(), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ri := requestInfo{Model: "m", Stream: stream}
	st := newReqTrace(q, &ri, expectUsage, time.Now(), context.Background(), 1<<10)
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	st.header(200, h)
	return st
}

type sseSummary struct {
	events, chunks       int
	reason, errType      string
	done, finish         bool
	prompt, completion   int64
	pendingPlusDelivered int64
}

func summarize(s *reqTrace) sseSummary {
	return sseSummary{s.events, s.chunks, s.reason, s.errType, s.sawDone, s.sawFinish, s.prompt, s.completion, int64(len(s.pending)) + s.recorded}
}

// FuzzSSEStream: however a response's bytes are split into writes, the
// middleware reads the same events from them, and never panics.
func FuzzSSEStream(f *testing.F) {
	chunk := func(delta, fr string) string {
		return `data: {"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fr + `}]}` + "\n\n"
	}
	for _, s := range []string{
		chunk(`{"role":"assistant","content":""}`, "null") + chunk(`{"content":"a"}`, "null") + chunk(`{}`, `"stop"`) +
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"text\":\"x\"}]}\r\n\r\n: keep-alive\r\n\r\ndata: [DONE]\r\n\r\n",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n",
		"data: {\"choices\":\ndata: [{\"delta\":{\"content\":\"multi-line\"}}]}\n\n",
		"data: {\"error\":{\"message\":\"x\"}}\n\n",
		"data:" + strings.Repeat("x", 2000) + "\n\ndata: {\"choices\":[{\"text\":\"y\"}]}\n\n",
		"\r\r\n\n\rdata: x\r",
	} {
		f.Add([]byte(s), uint64(0x9e3779b97f4a7c15))
	}
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tracenoop.NewTracerProvider()), otelstats.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	f.Fuzz(func(t *testing.T, stream []byte, splits uint64) {
		n++
		whole := newTestTrace(t, tr, 2*n, true, splits&1 == 0)
		whole.wrote(time.Now(), stream, nil)
		parts := newTestTrace(t, tr, 2*n+1, true, splits&1 == 0)
		rest := stream
		for s := splits; len(rest) > 0; s = s*6364136223846793005 + 1442695040888963407 {
			k := min(len(rest), int(s>>59)+1)
			parts.wrote(time.Now(), rest[:k], nil)
			rest = rest[k:]
		}
		if a, b := summarize(whole), summarize(parts); a != b {
			t.Fatalf("one write: %+v\n  split: %+v", a, b)
		}
		whole.finish(outcome{end: time.Now()})
		parts.finish(outcome{end: time.Now()})
	})
}

func TestParentContextTrust(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	ours := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for _, c := range []struct {
		name         string
		header       string
		base         trace.SpanContext
		trust        bool
		public       bool
		wantValid    bool
		wantSampled  bool
		wantOurs     bool
		wantRemoteID string
	}{
		{name: "no header", wantValid: false},
		{name: "no header, our span", base: ours, wantValid: true, wantSampled: true, wantOurs: true},
		{name: "untrusted unsampled", header: tp, wantValid: true, wantSampled: true, wantRemoteID: "00f067aa0ba902b7"},
		{name: "trusted unsampled", header: tp, trust: true, wantValid: true, wantSampled: false, wantRemoteID: "00f067aa0ba902b7"},
		{name: "public", header: tp, public: true, wantValid: false},
		{name: "public with our span", header: tp, public: true, base: ours, wantValid: true, wantSampled: true, wantOurs: true},
		{name: "trusted beats public", header: tp, trust: true, public: true, wantValid: true, wantRemoteID: "00f067aa0ba902b7"},
		{name: "garbage header", header: "00-zz-yy-01", wantValid: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &handler{cfg: config{prop: propagation.TraceContext{},
				trust:  func(*http.Request) bool { return c.trust },
				public: func(*http.Request) bool { return c.public }}}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			if c.base.IsValid() {
				r = r.WithContext(trace.ContextWithSpanContext(r.Context(), c.base))
			}
			if c.header != "" {
				r.Header.Set("traceparent", c.header)
			}
			sc := trace.SpanContextFromContext(h.parentContext(r))
			if sc.IsValid() != c.wantValid {
				t.Fatalf("valid %v", sc.IsValid())
			}
			if !sc.IsValid() {
				return
			}
			if c.wantOurs && !sc.Equal(ours) {
				t.Errorf("parent %v, want our span", sc)
			}
			if c.wantRemoteID != "" && (sc.SpanID().String() != c.wantRemoteID || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736") {
				t.Errorf("parent %v", sc)
			}
			if sc.IsSampled() != c.wantSampled && !(c.trust && c.public) {
				t.Errorf("sampled %v, want %v", sc.IsSampled(), c.wantSampled)
			}
		})
	}
}
