package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/internal/proxy"
	"github.com/llmtrace/llmtrace/internal/spanlog"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func init() {
	commands["proxy"] = command{
		summary: "a tracing reverse proxy in front of any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, Ollama)",
		run: untilSignal(func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			return runProxy(ctx, args, stdout, stderr, nil)
		}),
	}
}

// runProxy serves until ctx ends. ready, when set, gets the address it
// listens on.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address clients connect to")
	upstream := fs.String("upstream", "", "the OpenAI-compatible server, e.g. http://127.0.0.1:8000 (required)")
	trust := fs.Bool("trust-traceparent", false, "let callers' traceparent sampled flag decide whether a trace is kept (SPEC §6)")
	stallFactor := fs.Float64("stall-factor", proxy.DefaultStallFactor, "a gap between chunks this many times the request's median gap is a stall…")
	stallMin := fs.Duration("stall-min", proxy.DefaultStallMin, "…when it is also longer than this")
	maxBody := fs.Int64("max-body", proxy.DefaultMaxBody, "request bodies read ahead to learn the model; longer ones pass untraced")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus /metrics on this address")
	statsOut := fs.String("stats-out", "", "write one RequestStats JSON object per finished request to FILE (- for stdout)")
	spansOut := fs.String("spans-out", "", "write every span as a JSON line to FILE (- for stdout)")
	statsLog := fs.Duration("stats-log", 10*time.Second, "interval of the stats line on stderr (0: off)")
	drain := fs.Duration("drain", 30*time.Second, "on SIGINT/SIGTERM, how long running streams may finish")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace proxy -upstream URL [-listen ADDR] [flags]\n\n"+
			"Proxies every request to the upstream, streaming responses through unbuffered.\n"+
			"POST /v1/chat/completions, /v1/completions, /v1/responses and /v1/embeddings\n"+
			"become traces and metrics (OTLP when OTEL_* is set); the traceparent sent\n"+
			"upstream puts the engine's own spans into the same trace.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 2); !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "llmtrace proxy: "+format+"\n", a...)
		return 1
	}
	up, err := url.Parse(*upstream)
	if *upstream == "" || err != nil || up.Host == "" || (up.Scheme != "http" && up.Scheme != "https") {
		fs.Usage()
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail("%v", err)
	}
	var ml net.Listener
	if *metricsAddr != "" {
		if ml, err = net.Listen("tcp", *metricsAddr); err != nil {
			l.Close()
			return fail("%v", err)
		}
	}
	closeListeners := func() {
		l.Close()
		if ml != nil {
			ml.Close()
		}
	}

	cfg := otelconf.Config{ServiceName: "llmtrace-proxy", Prometheus: ml != nil}
	if *spansOut != "" {
		w := stdout
		if *spansOut != "-" {
			f, err := os.Create(*spansOut)
			if err != nil {
				closeListeners()
				return fail("%v", err)
			}
			w = f
		}
		cfg.SpanProcessors = []sdktrace.SpanProcessor{spanlog.New(w, w != stdout)}
	}
	prov, err := otelconf.Setup(ctx, cfg)
	if err != nil {
		closeListeners()
		return fail("telemetry setup: %v", err)
	}
	opts := append(prov.TrackerOptions(),
		otelstats.WithTrustParentSampling(*trust),
		otelstats.WithAutoSweep(time.Second),
	)
	if *statsLog > 0 {
		opts = append(opts, otelstats.WithStatsLog(logger, *statsLog))
	}
	var sink *statsSink
	if *statsOut != "" {
		if sink, err = openStatsSink(*statsOut, stdout, true); err != nil {
			closeListeners()
			_ = prov.Shutdown(context.Background())
			return fail("%v", err)
		}
		opts = append(opts, otelstats.WithOnFinish(sink.write))
	}
	p, err := proxy.New(proxy.Config{
		Upstream: up, TracerProvider: prov.TracerProvider, MeterProvider: prov.MeterProvider,
		MaxBody: *maxBody, Stall: proxy.StallPolicy{Factor: *stallFactor, Min: *stallMin}, Logger: logger,
	}, opts...)
	if err != nil {
		closeListeners()
		_ = prov.Shutdown(context.Background())
		return fail("%v", err)
	}

	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(l) }()
	var msrv *http.Server
	if ml != nil {
		msrv = &http.Server{Handler: prov.MetricsHandler, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- msrv.Serve(ml) }()
	}
	logger.Info("proxying", "listen", l.Addr().String(), "upstream", up.String())
	if ready != nil {
		ready(l.Addr().String())
	}
	status := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		logger.Error("serving failed", "err", err)
		status = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if msrv != nil {
		_ = msrv.Close()
	}
	fctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	_ = p.Shutdown(fctx)
	if err := prov.Shutdown(fctx); err != nil {
		logger.Warn("export", "err", err)
	}
	if sink != nil {
		_ = sink.close()
	}
	return status
}
