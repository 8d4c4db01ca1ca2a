// Command httpserver is an OpenAI-compatible streaming server over a toy
// engine, traced by the openaihttp middleware: every chat or completions
// request becomes a trace (root, input processing, queue, prefill, decode,
// detokenize) and counts in the serving metrics.
//
//	go run ./examples/httpserver -listen 127.0.0.1:8000
//
//	curl -N localhost:8000/v1/chat/completions -d '{"model":"toy","stream":true,
//	  "stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}'
//
// Any OpenAI client works against it (base URL http://127.0.0.1:8000/v1).
// Traces and metrics go where the standard OTEL_* variables say (e.g.
// OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317); /metrics serves
// Prometheus; /health answers untraced. A stats line like vLLM's goes to
// stderr every -stats-interval. -debug-listen serves the process's pprof
// profiles and runtime figures (the overhead study in e2e/overhead reads
// them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/internal/debugsrv"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8000", "address to serve on")
	model := flag.String("model", "toy", "model name served")
	slots := flag.Int("slots", 8, "requests decoded at once; the rest queue")
	tokenDelay := flag.Duration("token-delay", 20*time.Millisecond, "time per decode step")
	statsInterval := flag.Duration("stats-interval", 10*time.Second, "period of the stats line (0: none)")
	trust := flag.Bool("trust-traceparent", false, "let callers' traceparent sampled flag decide sampling")
	debugListen := flag.String("debug-listen", "", "serve pprof profiles (/debug/pprof/) and runtime figures (/debug/vars) on this address")
	flag.Parse()
	if *debugListen != "" {
		addr, stop, err := debugsrv.Serve(*debugListen)
		if err != nil {
			fmt.Fprintf(os.Stderr, "httpserver: %v\n", err)
			os.Exit(1)
		}
		defer stop()
		fmt.Fprintf(os.Stderr, "httpserver: debug endpoints on http://%s/debug/\n", addr)
	}
	if err := run(*listen, *model, *slots, *tokenDelay, *statsInterval, *trust); err != nil {
		fmt.Fprintf(os.Stderr, "httpserver: %v\n", err)
		os.Exit(1)
	}
}

func run(listen, model string, slots int, tokenDelay, statsInterval time.Duration, trust bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "llmtrace-httpserver", Prometheus: true})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = prov.Shutdown(sctx)
	}()

	opts := append(prov.TrackerOptions(),
		otelstats.WithModels(model),
		// Real time: let waits and TTLs expire even when no update comes.
		otelstats.WithAutoSweep(time.Second),
		// A caller's sampled flag decides only when both the tracker and
		// the middleware trust it (openaihttp's package doc).
		otelstats.WithTrustParentSampling(trust),
	)
	if statsInterval > 0 {
		opts = append(opts, otelstats.WithStatsLog(slog.New(slog.NewTextHandler(os.Stderr, nil)), statsInterval))
	}
	tracker, err := otelstats.NewTracker(opts...)
	if err != nil {
		return err
	}
	defer tracker.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/v1/", toyserver.New(toyserver.Config{Models: []string{model}, Slots: slots, TokenDelay: tokenDelay, Tracker: tracker}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", prov.MetricsHandler)

	srv := &http.Server{
		Addr:              listen,
		Handler:           openaihttp.NewHandler(mux, tracker, openaihttp.WithTrustIncomingSampling(trust), openaihttp.WithPropagators(prov.Propagator())),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(os.Stderr, "httpserver: serving %q on http://%s/v1 (traces: %v, metrics: %v)\n", model, listen, prov.TracesExported, prov.MetricsExported)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
