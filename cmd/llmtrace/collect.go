package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/internal/spanlog"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

func init() {
	commands["collect"] = command{
		summary: "collect updates from engines in other processes (Unix socket, loopback TCP, stdin, HTTP) into traces and metrics",
		run:     untilSignal(collect),
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// collect runs until ctx ends, or until stdin ends when stdin is its only
// input.
func collect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var listen listFlag
	fs.Var(&listen, "listen", "where producers connect: unix:PATH, tcp:127.0.0.1:PORT, or - for stdin (repeatable)")
	httpAddr := fs.String("http", "", "serve POST /v1/updates (JSON lines or binary) and /healthz on this address")
	prom := fs.Bool("prometheus", false, "also serve the metrics on -http at /metrics")
	align := fs.Bool("align-clocks", false, "map every producer onto this process's wall clock at its HELLO (same-host producers with skewed clocks)")
	allowRemote := fs.Bool("allow-remote", false, "allow TCP addresses that are not loopback (updates are unauthenticated)")
	queue := fs.Int("queue", transport.DefaultQueueSize, "updates decoded but not yet recorded; beyond it updates are dropped and counted")
	workers := fs.Int("workers", transport.DefaultWorkers, "goroutines recording into the tracker")
	grace := fs.Duration("grace", otelstats.DefaultFrontendGrace, "how long a request one side finished waits for the other side's FINISHED")
	hold := fs.Duration("hold", otelstats.DefaultHoldWindow, "how long an update may precede its request's ARRIVED")
	statsOut := fs.String("stats-out", "", "write one RequestStats JSON object per finished request to FILE (- for stdout)")
	spansOut := fs.String("spans-out", "", "write every span as a JSON line to FILE (- for stdout)")
	statsLog := fs.Duration("stats-log", 10*time.Second, "interval of the vLLM-style stats line on stderr (0: off)")
	verbose := fs.Bool("v", false, "log every rejected update")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace collect -listen unix:PATH|tcp:127.0.0.1:PORT|- [-listen …] [-http ADDR] [flags]\n\n"+
			"Reads lifecycle updates from engines in other processes — JSON lines (the update\n"+
			"log, plus HELLO and mono_ts) or the binary encoding of internal/transport — and\n"+
			"turns them into traces and metrics (OTLP when OTEL_* is set). Runs until\n"+
			"interrupted, or until stdin ends when stdin is the only input. Times are\n"+
			"live: requests idle for 10 minutes end as abandoned; for a recorded log use\n"+
			"llmtrace replay.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 2); !ok {
		return code
	}
	if len(listen) == 0 && *httpAddr == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "llmtrace collect: "+format+"\n", a...)
		return 1
	}

	var addrs []transport.Addr
	useStdin := false
	for _, l := range listen {
		if l == "-" || l == "stdin" {
			useStdin = true
			continue
		}
		a, err := transport.ParseAddr(l)
		if err != nil {
			return fail("%v", err)
		}
		addrs = append(addrs, a)
	}

	// Listen first: a taken address fails before anything is set up.
	var listeners []net.Listener
	var httpL net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
		if httpL != nil {
			_ = httpL.Close()
		}
	}()
	for _, a := range addrs {
		l, err := transport.Listen(a, *allowRemote)
		if err != nil {
			return fail("%v", err)
		}
		logger.Info("listening", "addr", a.Network+":"+l.Addr().String())
		listeners = append(listeners, l)
	}
	if *httpAddr != "" {
		l, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fail("%v", err)
		}
		logger.Info("serving HTTP", "addr", l.Addr().String())
		httpL = l
	}

	var closers []func() error
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	}()
	openOut := func(name string) (io.Writer, error) {
		if name == "-" {
			return stdout, nil
		}
		f, err := os.Create(name)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	cfg := otelconf.Config{ServiceName: "llmtrace-collect", Prometheus: *prom}
	var spanDump *spanlog.Processor
	if *spansOut != "" {
		w, err := openOut(*spansOut)
		if err != nil {
			return fail("%v", err)
		}
		spanDump = spanlog.New(w, w != stdout)
		cfg.SpanProcessors = []sdktrace.SpanProcessor{spanDump}
		closers = append(closers, func() error { return spanDump.Shutdown(context.Background()) })
	}
	prov, err := otelconf.Setup(ctx, cfg)
	if err != nil {
		return fail("telemetry setup: %v", err)
	}

	var sink *statsSink
	if *statsOut != "" {
		if sink, err = openStatsSink(*statsOut, stdout, false); err != nil {
			_ = prov.Shutdown(context.Background())
			return fail("%v", err)
		}
	}
	opts := append(prov.TrackerOptions(),
		otelstats.WithFrontendGrace(*grace),
		otelstats.WithHoldWindow(*hold),
		otelstats.WithAutoSweep(100*time.Millisecond),
		otelstats.WithOnReject(func(e *otelstats.RejectError) { logger.Debug("update rejected", "err", e) }),
	)
	if *statsLog > 0 {
		opts = append(opts, otelstats.WithStatsLog(logger, *statsLog))
	}
	if sink != nil {
		opts = append(opts, otelstats.WithOnFinish(sink.write))
	}
	tr, err := otelstats.NewTracker(opts...)
	if err != nil {
		_ = prov.Shutdown(context.Background())
		return fail("%v", err)
	}
	col, err := transport.NewCollector(transport.Config{
		Tracker: tr, QueueSize: *queue, Workers: *workers, AlignClocks: *align,
		Logger: logger, MeterProvider: prov.MeterProvider,
	})
	if err != nil {
		_ = tr.Shutdown(context.Background())
		_ = prov.Shutdown(context.Background())
		return fail("%v", err)
	}

	errc := make(chan error, len(listeners)+1)
	var serving sync.WaitGroup
	for _, l := range listeners {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := col.Serve(l); err != nil {
				errc <- err
			}
		}()
	}
	listeners = nil // the collector closes them now
	var srv *http.Server
	if httpL != nil {
		mux := http.NewServeMux()
		mux.Handle("/", col.Handler())
		if prov.MetricsHandler != nil {
			mux.Handle("/metrics", prov.MetricsHandler)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := srv.Serve(httpL); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		httpL = nil
	}
	stdinDone := make(chan struct{})
	if useStdin {
		go func() {
			defer close(stdinDone)
			st := col.ServeStream(stdin, "stdin")
			logger.Info("stdin ended", "updates", st.Updates, "dropped", st.Dropped, "malformed", st.Malformed,
				"truncated", st.Truncated, "rejected", st.Rejected)
		}()
	}
	onlyStdin := useStdin && len(addrs) == 0 && srv == nil
	status := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		logger.Error("serving failed", "err", err)
		status = 1
	case <-waitIf(onlyStdin, stdinDone):
	}

	// Drain: stop listening, record what was queued, end what is in flight.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if srv != nil {
		_ = srv.Shutdown(sctx)
	}
	if err := col.Close(sctx); err != nil {
		logger.Warn("queue not drained", "err", err)
	}
	serving.Wait()
	tr.Flush()
	_ = tr.Shutdown(sctx)
	if err := prov.Shutdown(sctx); err != nil {
		logger.Warn("export", "err", err)
	}
	if sink != nil {
		if err := sink.close(); err != nil {
			status = fail("%v", err)
		}
	}
	st := col.Stats()
	logger.Info("collector stopped", "streams", st.Streams, "updates", st.Updates, "recorded", st.Recorded,
		"rejected", st.Rejected, "dropped", st.Dropped, "malformed", st.Malformed, "truncated", st.Truncated,
		"oversized", st.Oversized, "garbage", st.Garbage, "no_anchor", st.NoAnchor)
	return status
}

// waitIf returns c when on, else a channel that never fires.
func waitIf(on bool, c chan struct{}) <-chan struct{} {
	if on {
		return c
	}
	return nil
}
