package openaihttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestProxyStreamEndsBeforeDone: an upstream whose stream ends cleanly
// (the chunked body's end) without [DONE], or with an error event, is a
// truncated stream or a stream error every time, never an abort: the client
// read the whole body (the issue: 8 of 60 were aborts).
func TestProxyStreamEndsBeforeDone(t *testing.T) {
	for _, c := range []struct {
		name, tail, errType string
	}{
		{"no [DONE]", "", openaihttp.ErrorTruncated},
		{"error event", "event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n", openaihttp.ErrorStream},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for range 3 {
					io.WriteString(w, "data: "+`{"id":"x","choices":[{"delta":{"content":"ok"}}]}`+"\n\n")
				}
				io.WriteString(w, c.tail)
			}), nil)
			// The upstream's small body gets a Content-Length, which the
			// proxy passes on: a client that closes its connection as
			// soon as it has the last byte, as curl does, may be gone
			// before the proxy's handler returns.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			const n = 40
			for range n {
				resp, err := client.Post(h.srv.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m","stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			for i, s := range h.waitStats(n) {
				if s.FinishReason != "error" || s.ErrorType != c.errType {
					t.Fatalf("request %d: finish %q/%q, want error/%q", i, s.FinishReason, s.ErrorType, c.errType)
				}
			}
		})
	}
}

// TestProxyStringsNotUTF8: a client's User-Agent and an upstream's response
// id and model that are not UTF-8 reach the spans as valid UTF-8 (U+FFFD
// for each run of bad bytes) and are counted: with the SDK's OTLP exporter
// one invalid string fails the whole batch, other users' spans with it.
func TestProxyStringsNotUTF8(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"id-\xff\",\"model\":\"m-\xfe\xfd\",\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	h := newHarness(t, up, nil)
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("User-Agent", "ag\xff\xfeent")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	ra := attrMap(h.spansOf(s.TraceID)["chat m"][0].Attributes())
	for k, want := range map[string]string{"user_agent.original": "ag\uFFFDent", "gen_ai.response.id": "id-\uFFFD",
		"gen_ai.response.model": "m-\uFFFD"} {
		if got, _ := ra[k].(string); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	counted := map[string]int64{}
	sum, _ := h.collect()[attributes.MetricAttributesTruncated].(metricdata.Sum[int64])
	for _, p := range sum.DataPoints {
		v, _ := p.Attributes.Value(attributes.TruncatedKey)
		counted[v.AsString()] += p.Value
	}
	for _, k := range []string{"user_agent.original", "gen_ai.response.id", "gen_ai.response.model"} {
		if counted[k] != 1 {
			t.Errorf("%s counted %d times, want 1 (%v)", k, counted[k], counted)
		}
	}
}
