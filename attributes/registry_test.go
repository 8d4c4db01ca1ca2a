package attributes_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// registry is the semantic-conventions registry as the semconv package of
// attributes.ConventionVersion carries it: every attribute key with its
// type, parsed from the generated attribute_group.go (the registry's own
// "Type:" line of each key), so the check follows the convention version
// the keys are taken from.
func registry(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.opentelemetry.io/otel").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "semconv", "v"+attributes.ConventionVersion, "attribute_group.go")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keyRE := regexp.MustCompile(`^\s*\w+Key = attribute\.Key\("([^"]+)"\)`)
	typeRE := regexp.MustCompile(`^\s*// Type: (.+)$`)
	reg := map[string]string{}
	typ := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := typeRE.FindStringSubmatch(sc.Text()); m != nil {
			typ = strings.TrimSpace(m[1])
		}
		if m := keyRE.FindStringSubmatch(sc.Text()); m != nil {
			reg[m[1]] = typ
			typ = ""
		}
	}
	if len(reg) < 500 {
		t.Fatalf("read %d keys from %s: the parser no longer fits the file", len(reg), path)
	}
	return reg
}

// conventional reports whether key lies in a namespace the conventions
// define (llm.* is llmtrace's own).
func conventional(key string) bool {
	for _, ns := range []string{"gen_ai.", "http.", "server.", "url.", "error.", "user_agent.", "network.", "client."} {
		if strings.HasPrefix(key, ns) {
			return true
		}
	}
	return false
}

// vendorKeys are the gen_ai keys kept on purpose though the conventions do
// not define them (README, Compatibility).
func vendorKey(key string) bool {
	return key == string(attributes.RequestID) || strings.HasPrefix(key, "gen_ai.latency.")
}

// typeOf is an attribute value's type in the registry's words.
func typeOf(v attribute.Value) string {
	switch v.Type() {
	case attribute.STRING:
		return "string"
	case attribute.INT64:
		return "int"
	case attribute.FLOAT64:
		return "double"
	case attribute.BOOL:
		return "boolean"
	case attribute.STRINGSLICE:
		return "string[]"
	case attribute.INT64SLICE:
		return "int[]"
	case attribute.FLOAT64SLICE:
		return "double[]"
	}
	return v.Type().String()
}

// TestExportConformsToRegistry exports every kind of span and metric
// llmtrace makes — a preempted, chunked request at every detail level, an
// error, P/D on both instances and the router, speculative decoding, a
// LoRA adapter, encoder runs, and the HTTP middleware and proxy on
// streamed, non-streamed and unreadable requests — and checks every
// attribute of a conventional namespace against the registry: the key
// exists and has the registry's type. The only findings allowed are the
// vendor keys kept on purpose. The three gen_ai.server.* metrics have the
// registry's names and units and their required attributes.
func TestExportConformsToRegistry(t *testing.T) {
	reg := registry(t)
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ctx := context.Background()
	for _, lvl := range []otelstats.Detail{otelstats.DetailRoot, otelstats.DetailTree, otelstats.DetailTokens} {
		tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp), otelstats.WithDetail(lvl))
		if err != nil {
			t.Fatal(err)
		}
		recordEveryKind(t, tr)
		_ = tr.Shutdown(ctx)
	}
	httpRequests(t, tp, mp)

	seen := map[string]bool{}
	check := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			k := string(kv.Key)
			seen[k] = true
			if !conventional(k) || vendorKey(k) {
				continue
			}
			typ, ok := reg[k]
			switch {
			case !ok:
				t.Errorf("%s: %s is not in the registry (semantic conventions %s)", where, k, attributes.ConventionVersion)
			case typ != typeOf(kv.Value) && !(strings.EqualFold(typ, "Enum") && kv.Value.Type() == attribute.STRING):
				t.Errorf("%s: %s is a %s, the registry says %s", where, k, typeOf(kv.Value), typ)
			}
		}
	}
	ended := rec.Ended()
	if len(ended) < 50 {
		t.Fatalf("only %d spans exported", len(ended))
	}
	for _, s := range ended {
		check("span "+s.Name(), s.Attributes())
		for _, e := range s.Events() {
			check("event "+e.Name, e.Attributes)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	units := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			for _, set := range dataPointSets(m.Data) {
				check("metric "+m.Name, set.ToSlice())
				if strings.HasPrefix(m.Name, "gen_ai.server.") {
					for _, req := range []attribute.Key{attributes.OperationName, attributes.ProviderName} {
						if !set.HasValue(req) {
							t.Errorf("metric %s lacks the required %s: %v", m.Name, req, set.ToSlice())
						}
					}
				}
			}
		}
	}
	for _, in := range []struct{ name, unit string }{
		{genaiconv.ServerTimeToFirstToken{}.Name(), genaiconv.ServerTimeToFirstToken{}.Unit()},
		{genaiconv.ServerTimePerOutputToken{}.Name(), genaiconv.ServerTimePerOutputToken{}.Unit()},
		{genaiconv.ServerRequestDuration{}.Name(), genaiconv.ServerRequestDuration{}.Unit()},
	} {
		if u, ok := units[in.name]; !ok || u != in.unit {
			t.Errorf("metric %s: exported %v with unit %q, the registry's unit is %q", in.name, ok, u, in.unit)
		}
	}
	for _, want := range []string{string(attributes.ProviderName), string(attributes.RequestTopK), "http.request.method",
		"http.response.status_code", string(attributes.UsageCacheReadInput), string(attributes.ResponseID)} {
		if !seen[want] {
			t.Errorf("no exported span or metric carried %s: the check proves less than it should", want)
		}
	}
}

func dataPointSets(d metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := d.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

var t0 = time.Unix(1_800_000_000, 0)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// recordEveryKind records one request of each kind into tr.
func recordEveryKind(t *testing.T, tr *otelstats.Tracker) {
	t.Helper()
	n := 0
	req := func(role, adapter string, ups ...otelstats.Update) {
		n++
		id := fmt.Sprintf("r%d", n)
		a := otelstats.Update{RequestID: id, Kind: otelstats.KindArrived, Time: at(0), Model: "m", PDRole: role, LoRAAdapter: adapter}
		for _, u := range append([]otelstats.Update{a}, ups...) {
			u.RequestID = id
			if err := tr.Record(u); err != nil {
				t.Fatalf("%s %v: %v", id, u.Kind, err)
			}
		}
	}
	temp, topK := 0.7, int64(40)
	sp := &otelstats.SamplingParams{Temperature: &temp, TopK: &topK, Stop: []string{"\n"}}
	common := []otelstats.Update{
		{Kind: otelstats.KindInputProcessed, Time: at(1), NumPromptTokens: 100, Sampling: sp},
		{Kind: otelstats.KindQueued, Time: at(2)},
	}
	run := func(start float64) []otelstats.Update {
		return []otelstats.Update{
			{Kind: otelstats.KindPrefilling, Time: at(start), NumComputedTokens: 50, NumCachedTokens: 16},
			{Kind: otelstats.KindPrefilling, Time: at(start + 1), NumComputedTokens: 100, NumCachedTokens: 16},
			{Kind: otelstats.KindDecoding, Time: at(start + 5)},
			{Kind: otelstats.KindDetokenized, Time: at(start + 5.5), NumNewTokens: 1, Busy: time.Microsecond},
		}
	}
	// Preempted, chunked, recomputed; then an error; P/D; speculative; LoRA
	// with an encoder run.
	preempted := append(append(append(append([]otelstats.Update{}, common...), run(3)...),
		otelstats.Update{Kind: otelstats.KindPreempted, Time: at(10)}), run(20)...)
	req("", "", append(preempted, otelstats.Update{Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: at(30), FinishReason: "length"},
		otelstats.Update{Kind: otelstats.KindFinished, Time: at(31), FinishReason: "length"})...)
	req("", "", append(append([]otelstats.Update{}, common...), otelstats.Update{Kind: otelstats.KindFinished, Time: at(4),
		FinishReason: "error", ErrorType: "timeout"})...)
	req(otelstats.PDRoleDecode, "", append(append([]otelstats.Update{}, common...),
		otelstats.Update{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0"},
		otelstats.Update{Kind: otelstats.KindRemoteKVReady, Time: at(5), NumRemoteTokens: 80, KVBytes: 1 << 20},
		otelstats.Update{Kind: otelstats.KindPrefilling, Time: at(6), NumComputedTokens: 100, NumCachedTokens: 16},
		otelstats.Update{Kind: otelstats.KindDecoding, Time: at(9)},
		otelstats.Update{Kind: otelstats.KindDecoding, Time: at(12), NumNewTokens: 3, NumDraftTokens: 4, NumAcceptedTokens: 2},
		otelstats.Update{Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: at(13), FinishReason: "stop"})...)
	req(otelstats.PDRolePrefill, "sql-lora", append(append([]otelstats.Update{}, common...),
		otelstats.Update{Kind: otelstats.KindEncoding, Time: at(3), NumItems: 1, NumEncoderTokens: 576},
		otelstats.Update{Kind: otelstats.KindEncoded, Time: at(4)},
		otelstats.Update{Kind: otelstats.KindPrefilling, Time: at(5), NumComputedTokens: 100},
		otelstats.Update{Kind: otelstats.KindDecoding, Time: at(9)},
		otelstats.Update{Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: at(9), FinishReason: otelstats.FinishRemoteDecode})...)
	tr.Flush()
}

// httpRequests drives the middleware and the proxy: a streamed request, a
// non-streamed one, and a body without a model.
func httpRequests(t *testing.T, tp *sdktrace.TracerProvider, mp *sdkmetric.MeterProvider) {
	t.Helper()
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp), otelstats.WithAutoSweep(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	engine := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(b), `"model"`) {
			http.Error(w, `{"error":"no model"}`, http.StatusBadRequest)
			return
		}
		if !strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1}}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{`{"id":"c2","model":"m","choices":[{"delta":{"content":"h"}}]}`,
			`{"id":"c2","model":"m","choices":[{"delta":{"content":"i"},"finish_reason":"stop"}]}`, `[DONE]`} {
			fmt.Fprintf(w, "data: %s\n\n", ev)
			w.(http.Flusher).Flush()
		}
	})
	mw := httptest.NewServer(openaihttp.NewHandler(engine, tr, openaihttp.WithTracerProvider(tp), openaihttp.WithMeterProvider(mp),
		openaihttp.WithServerTiming(true)))
	defer mw.Close()
	up, _ := url.Parse(mw.URL)
	proxy, err := openaihttp.NewProxy(up, tr, openaihttp.WithTracerProvider(tp), openaihttp.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.CloseIdleConnections()
	px := httptest.NewServer(proxy)
	defer px.Close()
	for _, body := range []string{
		`{"model":"m","stream":true,"temperature":0.5,"top_k":20,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`not json`,
	} {
		resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Both trackers' requests finish when their responses did; the live
	// sweep ends any wait.
	deadline := time.Now().Add(10 * time.Second)
	for tr.InFlight() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
