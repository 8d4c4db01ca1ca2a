package openaihttp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelstats"
)

// timingRE matches one Server-Timing entry with a duration.
var timingRE = regexp.MustCompile(`([a-z0-9]+);dur=([0-9.]+)`)

// serverTiming parses a Server-Timing value into its durations and the
// traceparent it names.
func serverTiming(t *testing.T, v string) (map[string]time.Duration, string) {
	t.Helper()
	out := map[string]time.Duration{}
	for _, m := range timingRE.FindAllStringSubmatch(v, -1) {
		var ms float64
		fmt.Sscan(m[2], &ms)
		out[m[1]] = time.Duration(ms * float64(time.Millisecond))
	}
	tp := ""
	if i := strings.Index(v, `traceparent;desc="`); i >= 0 {
		tp = strings.TrimSuffix(v[i+len(`traceparent;desc="`):], `"`)
	}
	return out, tp
}

// Server-Timing: a header on a response in one piece, a trailer on a
// stream, read by Go's HTTP client (which reads trailers), with the times
// the tracker recorded and the request's traceparent.
func TestServerTimingMiddleware(t *testing.T) {
	x := newH(t)
	words := []string{"a", "b", "c"}
	stream := &fakeServer{events: chatStream(words, "stop", `{"prompt_tokens":3,"completion_tokens":3}`), pause: 3 * time.Millisecond}
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", stream)
	srv, c := serve(t, x.handler(mux, x.tr, openaihttp.WithServerTiming(true)))
	resp, _ := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	s := x.only()
	if resp.Header.Get(openaihttp.ServerTimingHeader) != "" {
		t.Errorf("a stream's Server-Timing went out as a header: %q", resp.Header.Get(openaihttp.ServerTimingHeader))
	}
	d, tp := serverTiming(t, resp.Trailer.Get(openaihttp.ServerTimingHeader))
	if tp != "00-"+s.TraceID+"-"+s.SpanID+"-01" {
		t.Errorf("trailer traceparent %q, trace %s root %s (trailer %q)", tp, s.TraceID, s.SpanID, resp.Trailer)
	}
	if d["ttft"] != s.FirstTokenLatency.Value.Truncate(time.Microsecond) && (d["ttft"]-s.FirstTokenLatency.Value).Abs() > time.Microsecond {
		t.Errorf("trailer ttft %v, recorded %v", d["ttft"], s.FirstTokenLatency.Value)
	}
	if (d["e2e"]-s.E2ELatency.Value).Abs() > time.Microsecond || (d["decode"]-s.DecodeLatency.Value).Abs() > time.Microsecond {
		t.Errorf("trailer %v, recorded e2e %v decode %v", d, s.E2ELatency.Value, s.DecodeLatency.Value)
	}
}

// The middleware over an engine recording into the same tracker: a
// response in one piece carries the engine's queue, prefill and decode in
// its Server-Timing header.
func TestServerTimingHeaderHasTheEngine(t *testing.T) {
	x := newH(t)
	hd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		q := otelstats.RequestFromContext(r.Context())
		now := time.Now()
		_ = openaihttp.InputProcessed(r.Context(), now, 5)
		id := q.ID()
		for _, u := range []otelstats.Update{
			{RequestID: id, Kind: otelstats.KindQueued, Time: now.Add(time.Millisecond)},
			{RequestID: id, Kind: otelstats.KindPrefilling, Time: now.Add(3 * time.Millisecond), NumComputedTokens: 5},
			{RequestID: id, Kind: otelstats.KindDecoding, Time: now.Add(10 * time.Millisecond)},
			{RequestID: id, Kind: otelstats.KindDecoding, Time: now.Add(12 * time.Millisecond)},
			{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: now.Add(13 * time.Millisecond), FinishReason: "stop"},
		} {
			if err := x.tr.Record(u); err != nil {
				t.Error(err)
			}
		}
		time.Sleep(15 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
	})
	srv, c := serve(t, x.handler(hd, x.tr, openaihttp.WithServerTiming(true)))
	resp, _ := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
	d, tp := serverTiming(t, resp.Header.Get(openaihttp.ServerTimingHeader))
	x.only()
	if (d["queue"]-2*time.Millisecond).Abs() > time.Microsecond || (d["prefill"]-7*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("Server-Timing %q: queue %v prefill %v, want 2ms and 7ms", resp.Header.Get(openaihttp.ServerTimingHeader), d["queue"], d["prefill"])
	}
	if d["e2e"] < 15*time.Millisecond || tp == "" {
		t.Errorf("Server-Timing %q", resp.Header.Get(openaihttp.ServerTimingHeader))
	}
}

func TestServerTimingProxy(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "completions") && strings.Contains(r.Header.Get("X-Stream"), "1") {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, d := range []string{"a", "b"} {
				sseWrite(w, chunk(map[string]any{"content": d}, nil))
				time.Sleep(2 * time.Millisecond)
			}
			sseWrite(w, "[DONE]")
			return
		}
		time.Sleep(5 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	})
	h := newHarness(t, up, []openaihttp.Option{openaihttp.WithServerTiming(true)})
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d, tp := serverTiming(t, resp.Header.Get(openaihttp.ServerTimingHeader))
	s := h.waitStats(1)[0]
	if tp != "00-"+s.TraceID+"-"+s.SpanID+"-01" || d["e2e"] < 5*time.Millisecond || d["ttft"] != 0 {
		t.Errorf("non-stream Server-Timing %q (trace %s/%s)", resp.Header.Get(openaihttp.ServerTimingHeader), s.TraceID, s.SpanID)
	}
	resp = h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`, "X-Stream", "1")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s = h.waitStats(2)[1]
	d, tp = serverTiming(t, resp.Trailer.Get(openaihttp.ServerTimingHeader))
	if tp != "00-"+s.TraceID+"-"+s.SpanID+"-01" || (d["ttft"]-s.FirstTokenLatency.Value).Abs() > time.Microsecond ||
		(d["e2e"]-s.E2ELatency.Value).Abs() > time.Microsecond {
		t.Errorf("stream trailer %q, stats ttft %v e2e %v", resp.Trailer.Get(openaihttp.ServerTimingHeader), s.FirstTokenLatency.Value, s.E2ELatency.Value)
	}
	// Off by default: the trace id is the server's to tell.
	h2 := newHarness(t, up, nil)
	resp = h2.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
	resp.Body.Close()
	if v := resp.Header.Get(openaihttp.ServerTimingHeader); v != "" {
		t.Errorf("Server-Timing %q without the option", v)
	}
}

// A public endpoint: a caller's trace is not joined; the root starts a new
// trace and links to the caller's span — through the proxy too, whose
// upstream gets the new trace.
func TestPublicEndpointLinks(t *testing.T) {
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	caller := "00-" + callerTrace + "-" + callerSpan + "-01"
	x := newH(t)
	srv, c := serve(t, x.handler(&fakeServer{json: `{}`}, x.tr, openaihttp.WithPublicEndpoint()))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`, "traceparent", caller)
	x.only()
	root := x.span("chat m")
	if root.SpanContext().TraceID().String() == callerTrace || root.Parent().IsValid() {
		t.Errorf("middleware: root %v parent %v joined the caller", root.SpanContext(), root.Parent())
	}
	if ls := root.Links(); len(ls) != 1 || ls[0].SpanContext.TraceID().String() != callerTrace || ls[0].SpanContext.SpanID().String() != callerSpan {
		t.Errorf("middleware: links %v", root.Links())
	}

	var gotTP string
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotTP = r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
	})
	h := newHarness(t, up, []openaihttp.Option{openaihttp.WithPublicEndpoint()})
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`, "traceparent", caller)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	pr := h.spansOf(s.TraceID)["chat m"][0]
	if s.TraceID == callerTrace || pr.Parent().IsValid() || len(pr.Links()) != 1 || pr.Links()[0].SpanContext.SpanID().String() != callerSpan {
		t.Errorf("proxy: root %v parent %v links %v", pr.SpanContext(), pr.Parent(), pr.Links())
	}
	if !strings.HasPrefix(gotTP, "00-"+s.TraceID+"-") {
		t.Errorf("upstream traceparent %q, want the new trace %s", gotTP, s.TraceID)
	}
}

// A response that ends early without a transport error is an error, not
// "stop": a stream without [DONE], a close-delimited JSON body cut short.
func TestTruncatedResponses(t *testing.T) {
	t.Run("middleware stream without [DONE]", func(t *testing.T) {
		x := newH(t)
		fs := &fakeServer{events: []string{chatChunk(`{"content":"a"}`, ""), chatChunk(`{"content":"b"}`, "")}}
		srv, c := serve(t, x.handler(fs, x.tr))
		post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
		if s := x.only(); s.FinishReason != "error" || s.ErrorType != openaihttp.ErrorTruncated || s.NumOutputTokens != 2 {
			t.Errorf("finish %q/%q out %d", s.FinishReason, s.ErrorType, s.NumOutputTokens)
		}
	})
	closeAfter := func(body string, ctype string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			// HTTP/1.1 without Content-Length or chunking: the body ends
			// when the connection closes.
			fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n%s", ctype, body)
			_ = brw.Flush()
		})
	}
	for _, c := range []struct {
		name, body, ctype, reason, errType string
	}{
		{"proxy: close-delimited JSON cut short", `{"id":"x","choices":[{"message":{"content":"hel`, "application/json", "error", openaihttp.ErrorTruncated},
		{"proxy: close-delimited JSON whole", `{"id":"x","choices":[{"message":{"content":"hello"},"finish_reason":"length"}]}`, "application/json", "length", ""},
		{"proxy: stream closed before [DONE]", "data: " + `{"choices":[{"delta":{"content":"a"}}]}` + "\n\n", "text/event-stream", "error", openaihttp.ErrorTruncated},
		{"proxy: stream closed after [DONE]", "data: " + `{"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n", "text/event-stream", "stop", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, closeAfter(c.body, c.ctype), nil)
			resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != c.body {
				t.Errorf("client got %q", b)
			}
			if s := h.waitStats(1)[0]; s.FinishReason != c.reason || s.ErrorType != c.errType {
				t.Errorf("finish %q/%q, want %q/%q", s.FinishReason, s.ErrorType, c.reason, c.errType)
			}
		})
	}
}

// -upstream http://host:port/v1 must not double the path.
func TestProxyUpstreamBasePath(t *testing.T) {
	var mu = make(chan string, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu <- r.URL.RequestURI()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	h := newHarness(t, http.NotFoundHandler(), nil)
	for _, c := range []struct{ base, path, want string }{
		{"/v1", "/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/", "/v1/chat/completions?x=1", "/v1/chat/completions?x=1"},
		{"/v1", "/chat/completions", "/v1/chat/completions"},
		{"/openai/v1", "/v1/chat/completions", "/openai/v1/chat/completions"},
		{"/api", "/v1/models", "/api/v1/models"},
		{"", "/v1/completions", "/v1/completions"},
	} {
		u, _ := url.Parse(up.URL + c.base)
		p, err := openaihttp.NewProxy(u, h.tr, openaihttp.WithTracerProvider(h.tp), openaihttp.WithMeterProvider(h.mp))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p)
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		p.CloseIdleConnections()
		if got := <-mu; got != c.want {
			t.Errorf("upstream %s, client %s: upstream got %s, want %s", c.base, c.path, got, c.want)
		}
	}
}

// The HTTP conventions: http.server.request.duration (and the proxy's
// http.client.request.duration) with their attributes, http.* on the root.
func TestHTTPConventions(t *testing.T) {
	x := newH(t)
	srv, c := serve(t, x.handler(&fakeServer{json: `{"choices":[]}`, status: 503}, x.tr))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`, "User-Agent", "ua/"+strings.Repeat("x", 1000))
	x.only()
	pts := histPoints(t, x.metrics(), "http.server.request.duration")
	if len(pts) != 1 || pts[0].Count != 1 {
		t.Fatalf("http.server.request.duration %v", pts)
	}
	want := map[attribute.Key]any{"http.request.method": "POST", "url.scheme": "http", "http.route": "/v1/chat/completions",
		"http.response.status_code": int64(503), "network.protocol.version": "1.1", "error.type": "503"}
	for k, v := range want {
		if got, ok := pts[0].Attributes.Value(k); !ok || got.AsInterface() != v {
			t.Errorf("metric %s = %v, want %v", k, got.AsInterface(), v)
		}
	}
	root := x.span("chat m")
	for k, v := range map[attribute.Key]any{"http.request.method": "POST", "http.route": "/v1/chat/completions", "http.response.status_code": int64(503),
		"url.scheme": "http", "server.address": "127.0.0.1"} {
		if got, ok := attr(root, k); !ok || got.AsInterface() != v {
			t.Errorf("root %s = %v, want %v", k, got.AsInterface(), v)
		}
	}
	if ua, _ := attr(root, "user_agent.original"); len(ua.AsString()) != 512 {
		t.Errorf("user agent %d bytes, want cut at 512", len(ua.AsString()))
	}
	if n := x.counter(attributes.MetricAttributesTruncated, attributes.TruncatedKey.String("user_agent.original")); n != 1 {
		t.Errorf("%d cut user agents counted", n)
	}

	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"model":%q,"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`, strings.Repeat("i", 1000), strings.Repeat("é", 300))
	})
	h := newHarness(t, up, nil)
	resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	rm := h.collect()
	if pts := histPoints(t, rm, "http.client.request.duration"); len(pts) != 1 {
		t.Errorf("http.client.request.duration %v", pts)
	} else if v, _ := pts[0].Attributes.Value("server.port"); v.AsInt64() == 0 {
		t.Errorf("client metric attributes %v", pts[0].Attributes)
	}
	if pts := histPoints(t, rm, "http.server.request.duration"); len(pts) != 1 {
		t.Errorf("proxy http.server.request.duration %v", pts)
	}
	ra := attrMap(h.spansOf(s.TraceID)["chat m"][0].Attributes())
	if id := ra["gen_ai.response.id"].(string); len(id) != 256 {
		t.Errorf("response id %d bytes, want cut at 256", len(id))
	}
	if m := ra["gen_ai.response.model"].(string); len(m) > otelstats.MaxModelLength || !strings.HasPrefix(m, "éé") {
		t.Errorf("response model %d bytes", len(m))
	}
}

func histPoints(t *testing.T, m map[string]metricdata.Aggregation, name string) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	d, ok := m[name]
	if !ok {
		return nil
	}
	return d.(metricdata.Histogram[float64]).DataPoints
}

// The proxy holds no request body: a 15 MB prompt with its model last is
// traced under its model although the budget would not hold 1 KB of it.
func TestProxyStreamsBodies(t *testing.T) {
	var got int
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got = int(n)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	})
	h := newHarness(t, up, []openaihttp.Option{openaihttp.WithBodyBudget(1 << 10)})
	body := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 15<<20) + `"}],"model":"late","temperature":0.5}`
	resp := h.post(context.Background(), "/v1/chat/completions", body)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s := h.waitStats(1)[0]
	if got != len(body) || s.Model != "late" || s.FinishReason != "stop" {
		t.Errorf("upstream got %d of %d bytes; model %q finish %q", got, len(body), s.Model, s.FinishReason)
	}
	if v := attrMap(h.spansOf(s.TraceID)["chat late"][0].Attributes())["gen_ai.request.temperature"]; v != 0.5 {
		t.Errorf("temperature %v", v)
	}
}

// The budget bounds what is held across requests: an SSE event larger
// than it is not read (and counted), and the stream passes untouched.
func TestBodyBudgetRefuses(t *testing.T) {
	big := chatChunk(`{"content":"`+strings.Repeat("y", 8<<10)+`"}`, "")
	x := newH(t)
	fs := &fakeServer{events: []string{big, chatChunk(`{"content":"z"}`, "stop"), "[DONE]"}}
	hd := x.handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Write each event in two pieces, so it must be assembled.
		fs.ServeHTTP(splitWriter{w}, r)
	}), x.tr, openaihttp.WithBodyBudget(4<<10))
	srv, c := serve(t, hd)
	_, body := post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
	if got := sseData(body); len(got) != 3 || got[0] != big {
		t.Fatalf("client got %d events", len(got))
	}
	s := x.only()
	if s.NumOutputTokens != 1 || s.FinishReason != "stop" {
		t.Errorf("out %d finish %q: want the big event unread, the small one counted", s.NumOutputTokens, s.FinishReason)
	}
	if n := x.counter(attributes.MetricHTTPBodyBudgetRefused); n < 1 {
		t.Errorf("budget refusals counted %d", n)
	}
}

type splitWriter struct{ http.ResponseWriter }

func (w splitWriter) Write(p []byte) (int, error) {
	h := len(p) / 2
	n, err := w.ResponseWriter.Write(p[:h])
	if err != nil {
		return n, err
	}
	m, err := w.ResponseWriter.Write(p[h:])
	return n + m, err
}

func (w splitWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// The tracker may end a request itself (its TTL) while the proxy still
// serves it: nothing races (-race), nothing of the proxy's is emitted into
// the abandoned trace, and the proxy's late FINISHED is rejected quietly.
func TestTrackerEndsARequestBeingServed(t *testing.T) {
	release := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "a"}, nil))
		<-release
		sseWrite(w, chunk(map[string]any{"content": "b"}, "stop"))
		sseWrite(w, "[DONE]")
	})
	h := newHarness(t, up, nil, otelstats.WithRequestTTL(50*time.Millisecond), otelstats.WithAutoSweep(10*time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","stream":true}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	s := h.waitStats(1)[0]
	close(release)
	<-done
	if s.FinishReason != otelstats.FinishAbandoned {
		t.Errorf("finish %q, want abandoned", s.FinishReason)
	}
	for _, sp := range h.rec.Ended() {
		if sp.SpanContext().TraceID().String() == s.TraceID && (sp.Name() == "POST" || strings.HasPrefix(sp.Name(), "llm.proxy")) {
			t.Errorf("%s emitted into an abandoned trace", sp.Name())
		}
	}
}

func TestUpstreamModels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"llama-3-8b"},{"id":""},{"id":"`+strings.Repeat("m", 300)+`"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/v1"} {
		u, _ := url.Parse(base)
		got, err := openaihttp.UpstreamModels(context.Background(), srv.Client(), u)
		if err != nil || len(got) != 2 || got[0] != "llama-3-8b" || len(got[1]) != otelstats.MaxModelLength {
			t.Errorf("%s: %v, %v", base, got, err)
		}
	}
	u, _ := url.Parse(srv.URL + "/nothing")
	if _, err := openaihttp.UpstreamModels(context.Background(), srv.Client(), u); err == nil {
		t.Error("no error for a 404")
	}
}

// An upstream may answer before it has read the whole body (it streams
// while the prompt uploads): the proxy's body must keep flowing upstream
// after its response to the client has begun (full duplex), byte for byte.
func TestProxyFullDuplex(t *testing.T) {
	var got int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		head := make([]byte, 1<<10)
		n, _ := io.ReadFull(r.Body, head)
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "early"}, nil))
		m, _ := io.Copy(io.Discard, r.Body)
		got = int64(n) + m
		sseWrite(w, chunk(map[string]any{"content": "late"}, "stop"))
		sseWrite(w, "[DONE]")
	})
	h := newHarness(t, up, nil)
	// Under 256 KiB, which an HTTP/1 server would consume itself once the
	// response begins, were the proxy not full duplex; sent in two halves
	// so that the upstream answers while the second is still to come.
	body := `{"model":"m","stream":true,"messages":[{"content":"` + strings.Repeat("x", 100<<10) + `"}]}`
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(body[:len(body)/2]))
		time.Sleep(100 * time.Millisecond)
		pw.Write([]byte(body[len(body)/2:]))
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", pr)
	req.ContentLength = int64(len(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(b), "late") || got != int64(len(body)) {
		t.Fatalf("client got %d bytes (%v); upstream read %d of %d", len(b), err, got, len(body))
	}
	if s := h.waitStats(1)[0]; s.FinishReason != "stop" || s.NumOutputTokens != 2 || s.Model != "m" {
		t.Errorf("stats %+v", s)
	}
}

func TestConstructors(t *testing.T) {
	tr, err := otelstats.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	for _, u := range []string{"", "ftp://x", "http://", "/v1"} {
		up, _ := url.Parse(u)
		if _, err := openaihttp.NewProxy(up, tr); err == nil {
			t.Errorf("NewProxy(%q) accepted", u)
		}
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	if _, err := openaihttp.NewProxy(up, nil); err == nil {
		t.Error("NewProxy without a tracker accepted")
	}
	// NewMiddleware is NewHandler; WithHTTPMetrics(false) leaves the HTTP
	// metric to otelhttp.
	x := newH(t)
	mw := openaihttp.NewMiddleware(x.tr, openaihttp.WithMeterProvider(x.mp), openaihttp.WithHTTPMetrics(false),
		openaihttp.WithPropagators(nil), openaihttp.WithStallPolicy(openaihttp.StallPolicy{Factor: 2}))
	srv, c := serve(t, mw(&fakeServer{json: `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`}))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
	if s := x.only(); s.FinishReason != "stop" {
		t.Errorf("finish %q", s.FinishReason)
	}
	if pts := histPoints(t, x.metrics(), "http.server.request.duration"); len(pts) != 0 {
		t.Errorf("HTTP metric recorded with WithHTTPMetrics(false): %v", pts)
	}
}

// A client too slow to send its body, in a server with a ReadTimeout, is
// told 408 and its connection closed — not a 200 with an empty body — and
// the request ends as the 408 it got: the server's cut, not the client
// leaving (an abort would count it among the clients that gave up).
func TestProxySlowBodyIs408(t *testing.T) {
	h, srv := slowBodyServer(t, nil)
	srv.Config.IdleTimeout = time.Minute
	srv.Start()
	defer srv.Close()
	for _, path := range []string{"/v1/chat/completions", "/v1/audio/speech"} {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\",")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 408") {
			t.Errorf("%s: client read %q, %v: want a 408 and the connection closed", path, b, err)
		}
	}
	if s := h.waitStats(1)[0]; s.FinishReason != otelstats.FinishError || s.ErrorType != "408" || s.Model != "m" {
		t.Errorf("finish %q error.type %q model %q; want error, 408", s.FinishReason, s.ErrorType, s.Model)
	}
}

// slowBodyServer is a proxy, not started, in a server that gives a client
// 300 ms to send its request, before an upstream that reads the body.
func slowBodyServer(t *testing.T, protos *http.Protocols) (*harness, *httptest.Server) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(400)
	})
	h := newHarness(t, up, nil)
	srv := httptest.NewUnstartedServer(h.p)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Config.Protocols = protos
	return h, srv
}

// Over HTTP/2 the server's ReadTimeout fails a slow body's stream alone,
// the request still live: the client is told 408 all the same (not 504, as
// if the upstream were slow), on a connection that stays open for its
// other streams.
func TestProxySlowBodyIs408OverHTTP2(t *testing.T) {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	h, srv := slowBodyServer(t, &protos)
	srv.Start()
	defer srv.Close()
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	defer client.CloseIdleConnections()
	for _, path := range []string{"/v1/chat/completions", "/v1/audio/speech"} {
		pr, pw := io.Pipe()
		go func() { _, _ = io.WriteString(pw, `{"model":"m",`) }() // and nothing more
		resp, err := client.Post(srv.URL+path, "application/json", pr)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		pw.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Connection") != "" {
			t.Errorf("%s: HTTP/%d %d, Connection %q; want HTTP/2 408 and no Connection header", path, resp.ProtoMajor, resp.StatusCode, resp.Header.Get("Connection"))
		}
	}
	if s := h.waitStats(1)[0]; s.FinishReason != otelstats.FinishError || s.ErrorType != "408" || s.Model != "m" {
		t.Errorf("finish %q error.type %q model %q; want error, 408", s.FinishReason, s.ErrorType, s.Model)
	}
}

// The proxy captures content only when the tracker does (SPEC §6): the
// prompt from the body as it streams upstream, the completion from the
// stream.
func TestProxyContentCapture(t *testing.T) {
	up := streamOf("SECRET-", "OUT")
	body := `{"messages":[{"role":"user","content":"SECRET-IN"}],"model":"m","stream":true}`
	for _, c := range []struct {
		name    string
		opts    []otelstats.Option
		in, out string
	}{
		{"default", nil, "", ""},
		{"opted in", []otelstats.Option{otelstats.WithContentCapture(&otelstats.ContentCapture{})}, `[{"role":"user","parts":[{"type":"text","content":"SECRET-IN"}]}]`,
			`[{"role":"assistant","parts":[{"type":"text","content":"SECRET-OUT"}],"finish_reason":"stop"}]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, up, nil, c.opts...)
			resp := h.post(context.Background(), "/v1/chat/completions", body)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s := h.waitStats(1)[0]
			for _, sp := range h.spansOf(s.TraceID) {
				for _, x := range sp {
					for _, kv := range x.Attributes() {
						if strings.Contains(kv.Value.String(), "SECRET") && c.in == "" {
							t.Errorf("%s has %s = %q without opting in", x.Name(), kv.Key, kv.Value.String())
						}
					}
				}
			}
			a := attrMap(h.spansOf(s.TraceID)["chat m"][0].Attributes())
			if in, _ := a["gen_ai.input.messages"].(string); in != c.in {
				t.Errorf("input %q, want %q", in, c.in)
			}
			if out, _ := a["gen_ai.output.messages"].(string); out != c.out {
				t.Errorf("output %q, want %q", out, c.out)
			}
		})
	}
}

// Whoever sees a request finish (WithOnFinish, a test waiting for its stats)
// already sees its HTTP metrics: they are recorded before the request ends.
func TestHTTPMetricsBeforeFinish(t *testing.T) {
	type seen struct{ server, client int }
	at := make(chan seen, 1)
	look := func(m map[string]metricdata.Aggregation) {
		at <- seen{len(histPoints(t, m, "http.server.request.duration")), len(histPoints(t, m, "http.client.request.duration"))}
	}

	var x *h
	x = newH(t, otelstats.WithOnFinish(func(*otelstats.RequestStats) { look(x.metrics()) }))
	srv, c := serve(t, x.handler(&fakeServer{json: `{"choices":[]}`}, x.tr))
	post(t, c, srv.URL+"/v1/chat/completions", `{"model":"m"}`)
	if s := <-at; s.server != 1 {
		t.Errorf("middleware: %d server points when the request finished, want 1", s.server)
	}

	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}`)
	})
	var hp *harness
	hp = newHarness(t, up, nil, otelstats.WithOnFinish(func(*otelstats.RequestStats) { look(hp.collect()) }))
	resp := hp.post(context.Background(), "/v1/chat/completions", `{"model":"m"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if s := <-at; s.server != 1 || s.client != 1 {
		t.Errorf("proxy: %d server and %d client points when the request finished, want 1 and 1", s.server, s.client)
	}
}

// TestProxyClosingCutsAsUnfinished: when the server's drain time is over
// and it closes the streams still running (Proxy.Closing, then
// http.Server.Close), they end as unfinished, not as clients' aborts: no
// client left, and a rolling deploy must not look like a wave of them.
func TestProxyClosingCutsAsUnfinished(t *testing.T) {
	release := make(chan struct{})
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		sseWrite(w, chunk(map[string]any{"content": "a"}, nil))
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	h := newHarness(t, up, nil)
	srv := httptest.NewServer(h.p)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 1)
	if _, err := resp.Body.Read(first); err != nil {
		t.Fatal(err)
	}
	h.p.Closing()
	srv.CloseClientConnections()
	defer srv.Close()
	resp.Body.Close()
	if s := h.waitStats(1)[0]; s.FinishReason != otelstats.FinishUnfinished {
		t.Errorf("finish %q error.type %q, want unfinished", s.FinishReason, s.ErrorType)
	}
}
