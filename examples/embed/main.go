// Command embed is a program of its own — its own module, as yours would
// be — that embeds each public part of llmtrace the way the README shows
// it:
//
//   - otelconf.Setup builds the providers from the standard OTEL_*
//     variables and hands the tracker its options;
//   - openaihttp.NewHandler wraps an OpenAI-compatible server's mux;
//   - openaihttp.NewProxy is mounted in a gateway's own mux, beside its
//     other routes;
//   - a transport.Producer in "another process" (here a goroutine with its
//     own clock anchor) streams an engine's lifecycle updates to a
//     transport.Collector feeding a tracker.
//
// Run it with go run . (from this directory); with OTEL_* set it also
// exports. It prints what each tracker saw and exits 0.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// finished collects what a tracker finished.
type finished struct {
	mu    sync.Mutex
	stats []otelstats.RequestStats
}

func (f *finished) add(s *otelstats.RequestStats) {
	f.mu.Lock()
	f.stats = append(f.stats, *s)
	f.mu.Unlock()
}

func (f *finished) wait(n int) []otelstats.RequestStats {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		f.mu.Lock()
		if len(f.stats) >= n {
			out := append([]otelstats.RequestStats(nil), f.stats...)
			f.mu.Unlock()
			return out
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]otelstats.RequestStats(nil), f.stats...)
}

func run(ctx context.Context, out io.Writer) error {
	// Telemetry from the environment; the span recorder lets this example
	// show the spans without a backend.
	rec := tracetest.NewSpanRecorder()
	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "embed-example", SpanProcessors: []sdktrace.SpanProcessor{rec}})
	if err != nil {
		return err
	}
	defer prov.Shutdown(ctx)

	var server, gateway, engine finished
	newTracker := func(f *finished, extra ...otelstats.Option) (*otelstats.Tracker, error) {
		opts := append(prov.TrackerOptions(), otelstats.WithAutoSweep(100*time.Millisecond), otelstats.WithOnFinish(f.add))
		return otelstats.NewTracker(append(opts, extra...)...)
	}

	// 1. An OpenAI-compatible server, its mux wrapped by the middleware.
	serverTracker, err := newTracker(&server)
	if err != nil {
		return err
	}
	defer serverTracker.Shutdown(ctx)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", chat)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	upstream, err := serve(openaihttp.NewHandler(mux, serverTracker))
	if err != nil {
		return err
	}
	defer upstream.Close()

	// 2. A gateway that mounts the tracing proxy in its own mux.
	gatewayTracker, err := newTracker(&gateway)
	if err != nil {
		return err
	}
	defer gatewayTracker.Shutdown(ctx)
	up, _ := url.Parse("http://" + upstream.Addr().String() + "/v1")
	proxy, err := openaihttp.NewProxy(up, gatewayTracker)
	if err != nil {
		return err
	}
	defer proxy.CloseIdleConnections()
	gmux := http.NewServeMux()
	gmux.Handle("/v1/", http.StripPrefix("/v1", proxy))
	gmux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "gateway up\n") })
	gw, err := serve(gmux)
	if err != nil {
		return err
	}
	defer gw.Close()

	// 3. An engine in another process streaming its updates to a collector.
	engineTracker, err := newTracker(&engine)
	if err != nil {
		return err
	}
	defer engineTracker.Shutdown(ctx)
	sock := filepath.Join(os.TempDir(), fmt.Sprintf("embed-%d.sock", os.Getpid()))
	addr, _ := transport.ParseAddr("unix:" + sock)
	l, err := transport.Listen(addr, false)
	if err != nil {
		return err
	}
	col, err := transport.NewCollector(transport.Config{Tracker: engineTracker})
	if err != nil {
		return err
	}
	go func() { _ = col.Serve(l) }()
	defer col.Close(ctx)

	// A client through the gateway, streaming.
	body := `{"model":"toy-llm","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post("http://"+gw.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), "[DONE]") {
		return fmt.Errorf("gateway answered %d: %s", resp.StatusCode, got)
	}

	// The engine's updates, sent as an engine in any language would.
	if err := produce("unix:"+sock, time.Now()); err != nil {
		return err
	}

	for _, p := range []struct {
		name string
		f    *finished
	}{{"server (middleware)", &server}, {"gateway (proxy)", &gateway}, {"engine (collector)", &engine}} {
		ss := p.f.wait(1)
		if len(ss) == 0 {
			return fmt.Errorf("%s: no request finished", p.name)
		}
		s := ss[0]
		fmt.Fprintf(out, "%-20s %s %s: %s, %d output tokens, ttft valid %v\n", p.name, s.Operation, s.Model,
			s.FinishReason, s.NumOutputTokens, s.FirstTokenLatency.Valid)
	}
	fmt.Fprintf(out, "spans recorded: %d\n", len(rec.Ended()))
	return nil
}

// serve serves h on a free loopback port.
func serve(h http.Handler) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = http.Serve(l, h) }()
	return l, nil
}

// chat streams a two-token answer, as an OpenAI-compatible server does.
func chat(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{
		`{"id":"c1","model":"toy-llm","choices":[{"delta":{"role":"assistant"}}]}`,
		`{"id":"c1","model":"toy-llm","choices":[{"delta":{"content":"Hel"}}]}`,
		`{"id":"c1","model":"toy-llm","choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}`,
		`{"id":"c1","model":"toy-llm","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
		`[DONE]`,
	} {
		fmt.Fprintf(w, "data: %s\n\n", ev)
		w.(http.Flusher).Flush()
	}
}

// produce sends one request's lifecycle to the collector at addr.
func produce(addr string, t0 time.Time) error {
	p, err := transport.NewProducer(transport.ProducerConfig{Addr: addr, Name: "engine-0", Side: otelstats.SideEngine})
	if err != nil {
		return err
	}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, u := range []otelstats.Update{
		{RequestID: "e1", Kind: otelstats.KindArrived, Time: at(0), Model: "toy-llm"},
		{RequestID: "e1", Kind: otelstats.KindQueued, Time: at(1)},
		{RequestID: "e1", Kind: otelstats.KindPrefilling, Time: at(2), NumComputedTokens: 5},
		{RequestID: "e1", Kind: otelstats.KindDecoding, Time: at(9)},
		{RequestID: "e1", Kind: otelstats.KindDecoding, Time: at(19)},
		{RequestID: "e1", Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: at(20), FinishReason: "stop"},
	} {
		if !p.Send(u) {
			return fmt.Errorf("producer dropped %s", u.Kind)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Close(ctx)
}
