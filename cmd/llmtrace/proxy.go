package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmtrace/llmtrace/internal/connlimit"
	"github.com/llmtrace/llmtrace/internal/debugsrv"
	"github.com/llmtrace/llmtrace/internal/httpproto"
	"github.com/llmtrace/llmtrace/internal/spanlog"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func init() {
	commands["proxy"] = command{
		summary: "a tracing reverse proxy in front of any OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, Ollama)",
		run: untilSignal(func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			keepServingOnBrokenPipe()
			return runProxy(ctx, args, stdout, stderr, nil)
		}),
	}
}

// proxyConfig is what the proxy's flags say.
type proxyConfig struct {
	listen, metricsListen string
	debugListen           string
	upstream              *url.URL
	trust, public         bool
	serverTiming          bool
	stall                 openaihttp.StallPolicy
	models                []string
	routes                []route
	modelsWait            time.Duration
	statsOut, spansOut    string
	statsLog, drain       time.Duration
	bodyBudget            int64
	eventLimit            int

	readHeaderTimeout, readTimeout, idleTimeout time.Duration
	maxHeaderBytes                              int
	maxConns                                    int
	transport                                   openaihttp.TransportConfig
}

// Defaults of the proxy's server bounds.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	// The whole request, body included: a 15 MB prompt over a slow link
	// takes a while, a client that sends nothing must not hold a
	// connection for ever.
	defaultReadTimeout    = 5 * time.Minute
	defaultIdleTimeout    = 2 * time.Minute
	defaultMaxHeaderBytes = 64 << 10
	// Below the file-descriptor limit Go raises the process to on most
	// systems, with room for the upstream's connections and the exports.
	defaultMaxConns = 4096
)

func proxyFlags(stderr io.Writer) (*flag.FlagSet, func() (*proxyConfig, error)) {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &proxyConfig{}
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address clients connect to")
	upstream := fs.String("upstream", "", "the OpenAI-compatible server's base URL, e.g. http://127.0.0.1:8000 or http://127.0.0.1:11434/v1 (required)")
	fs.BoolVar(&c.trust, "trust-traceparent", false, "let callers' traceparent sampled flag decide whether a trace is kept (SPEC §6)")
	fs.BoolVar(&c.public, "public", false, "a public endpoint: never join a caller's trace; start a new one linked to the caller's span")
	fs.BoolVar(&c.serverTiming, "server-timing", false, "tell clients their request's queue, ttft, prefill, decode and e2e times and traceparent (Server-Timing header; trailer on streams)")
	fs.Float64Var(&c.stall.Factor, "stall-factor", openaihttp.DefaultStallFactor, "a gap between chunks this many times the request's median gap is a stall… (> 0)")
	fs.DurationVar(&c.stall.Min, "stall-min", openaihttp.DefaultStallMin, "…when it is also longer than this (> 0)")
	models := fs.String("models", "", "comma-separated models that keep their own metric series (default: the upstream's /v1/models)")
	fs.DurationVar(&c.modelsWait, "models-wait", 10*time.Second, "without -models, how long to ask the upstream's /v1/models at start (0: don't; then the first 64 models whose requests succeed keep their series)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address")
	fs.StringVar(&c.debugListen, "debug-listen", "", "serve the process's pprof profiles (/debug/pprof/) and runtime figures (/debug/vars) on this address; bind it to loopback")
	fs.StringVar(&c.statsOut, "stats-out", "", "write one RequestStats JSON object per finished request to FILE (- for stdout)")
	fs.StringVar(&c.spansOut, "spans-out", "", "write every span as a JSON line to FILE (- for stdout), flushed every second")
	fs.DurationVar(&c.statsLog, "stats-log", 10*time.Second, "interval of the stats line on stderr (0: off)")
	fs.DurationVar(&c.drain, "drain", 30*time.Second, "on SIGINT/SIGTERM, how long running streams may finish")
	fs.Int64Var(&c.bodyBudget, "body-budget", openaihttp.DefaultBodyBudget, "bytes of bodies held at once over all requests (SSE events, response fields); past it they pass unread")
	fs.IntVar(&c.eventLimit, "event-limit", openaihttp.DefaultEventLimit, "bytes of one SSE event, or of a JSON response's choices, read; longer ones pass unread")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "time a client has to send its request headers (0: -read-timeout's)")
	fs.DurationVar(&c.readTimeout, "read-timeout", defaultReadTimeout, "time a client has to send its whole request, body included (0: none)")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long an idle keep-alive connection is kept (0: no bound)")
	fs.IntVar(&c.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "largest request header block accepted")
	fs.IntVar(&c.maxConns, "max-conns", defaultMaxConns, "client connections held at once; past it a new one closes the oldest idle one, or is refused when all are busy (0: no cap)")
	fs.DurationVar(&c.transport.ResponseHeaderTimeout, "upstream-header-timeout", openaihttp.DefaultResponseHeaderTimeout,
		"how long the upstream may take to send its response headers (a response that is not streamed sends them when it is done)")
	fs.DurationVar(&c.transport.DialTimeout, "upstream-dial-timeout", openaihttp.DefaultDialTimeout, "how long connecting to the upstream may take")
	fs.Func("route", "trace POST requests to the path of `PATH=OPERATION` as chat, text_completion or embeddings (PATH= stops tracing it); may be given more than once", func(s string) error {
		r, err := parseRoute(s)
		if err == nil {
			c.routes = append(c.routes, r)
		}
		return err
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace proxy -upstream URL [-listen ADDR] [flags]\n\n"+
			"Proxies every request to the upstream, streaming bodies both ways without holding them.\n"+
			"POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings\n"+
			"and each -route become traces and metrics (OTLP when OTEL_* is set); the\n"+
			"traceparent sent upstream puts the engine's own spans into the same trace.\n\nflags:")
		fs.PrintDefaults()
	}
	return fs, func() (*proxyConfig, error) {
		up, err := url.Parse(*upstream)
		switch {
		case *upstream == "":
			return nil, errors.New("-upstream is required")
		case err != nil && !strings.Contains(*upstream, "://"):
			// 127.0.0.1:8000 does not parse at all ("first path
			// segment in URL cannot contain colon").
			return nil, fmt.Errorf("-upstream %q: want http://host:port or https://host:port, with an optional base path", *upstream)
		case err != nil:
			return nil, fmt.Errorf("-upstream %q: %v", *upstream, err)
		case up.Scheme != "http" && up.Scheme != "https" || up.Host == "":
			return nil, fmt.Errorf("-upstream %q: want http://host:port or https://host:port, with an optional base path", *upstream)
		case !validPort(up.Port()):
			// url.Parse takes any digits: every request would fail at
			// its dial instead.
			return nil, fmt.Errorf("-upstream %q: port %s is out of range (1-65535)", *upstream, up.Port())
		case c.maxHeaderBytes <= 0 || c.bodyBudget <= 0 || c.eventLimit <= 0:
			return nil, errors.New("-max-header-bytes, -body-budget and -event-limit must be positive")
		case !(c.stall.Factor > 0) || math.IsInf(c.stall.Factor, 1): // NaN fails > too
			return nil, fmt.Errorf("-stall-factor must be a finite number > 0 (got %v)", c.stall.Factor)
		case c.stall.Min <= 0:
			// The library reads 0 as its default, 100 ms: say so rather
			// than run with a bound the user did not ask for.
			return nil, fmt.Errorf("-stall-min must be > 0 (got %v)", c.stall.Min)
		case c.transport.ResponseHeaderTimeout <= 0 || c.transport.DialTimeout <= 0:
			// Likewise: 0 would be the default (10 min, 10 s), not "none".
			return nil, errors.New("-upstream-header-timeout and -upstream-dial-timeout must be > 0")
		case c.drain < 0 || c.statsLog < 0 || c.modelsWait < 0 || c.readHeaderTimeout < 0 || c.readTimeout < 0 || c.idleTimeout < 0 || c.maxConns < 0:
			return nil, errors.New("-drain, -stats-log, -models-wait, -read-header-timeout, -read-timeout, -idle-timeout and -max-conns must be ≥ 0")
		case sameFile(c.statsOut, c.spansOut):
			return nil, fmt.Errorf("-stats-out and -spans-out name one file, %s: each writes its own", c.statsOut)
		}
		c.upstream = up
		for _, m := range strings.Split(*models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				c.models = append(c.models, m)
			}
		}
		return c, nil
	}
}

// validPort reports whether a URL's port, empty for the scheme's own, can
// be dialled.
func validPort(p string) bool {
	if p == "" {
		return true
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// runProxy serves until ctx ends. ready, when set, gets the address it
// listens on.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) int {
	fs, config := proxyFlags(stderr)
	if code, ok := parseFlags(fs, args, 2); !ok {
		return code
	}
	if fs.NArg() > 0 {
		// `proxy http://127.0.0.1:8000`, or `-models a, b`: ignored, the
		// proxy would run with something else than the user meant.
		return usageError(fs, "unexpected argument %q (the upstream goes after -upstream; -models takes one comma-separated list)", fs.Arg(0))
	}
	c, err := config()
	if err != nil {
		return usageError(fs, "%v", err)
	}
	if err := serveProxy(ctx, c, stdout, stderr, ready); err != nil {
		fmt.Fprintf(stderr, "llmtrace proxy: %v\n", err)
		// An OTEL_* value no exporter can use is the user's to fix, as a
		// bad flag is: the usage status, which a supervisor need not retry.
		var bad *otelconf.ConfigError
		if errors.As(err, &bad) {
			return 2
		}
		return 1
	}
	return 0
}

// serveProxy runs the proxy c describes until ctx ends.
func serveProxy(ctx context.Context, c *proxyConfig, stdout, stderr io.Writer, ready func(addr string)) error {
	r := &proxyRun{c: c, logger: slog.New(slog.NewTextHandler(stderr, nil))}
	closeListeners, err := r.listen()
	defer closeListeners()
	if err != nil {
		return err
	}
	if err := r.build(ctx, stdout); err != nil {
		return err
	}
	err = r.serve(ctx, ready)
	r.flushAtExit()
	return err
}

// proxyRun is one run of the proxy command: what serveProxy opens, for its
// steps to share.
type proxyRun struct {
	c        *proxyConfig
	logger   *slog.Logger
	l        *connlimit.Listener
	ml       net.Listener // -metrics-listen's, or nil
	prov     *otelconf.Providers
	sink     *statsSink         // -stats-out's, or nil
	spanDump *spanlog.Processor // -spans-out's, or nil
	tracker  *otelstats.Tracker
	p        *openaihttp.Proxy
}

// listen opens the listeners, before anything else, so that a taken port
// fails the start at once. closeAll closes what was opened, also on error.
func (r *proxyRun) listen() (closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	nl, err := net.Listen("tcp", r.c.listen)
	if err != nil {
		return closeAll, fmt.Errorf("-listen: %w", err)
	}
	r.l = connlimit.New(nl, r.c.maxConns)
	closers = append(closers, func() { _ = r.l.Close() })
	if r.c.metricsListen != "" {
		if r.ml, err = net.Listen("tcp", r.c.metricsListen); err != nil {
			return closeAll, fmt.Errorf("-metrics-listen: %w", err)
		}
		closers = append(closers, func() { _ = r.ml.Close() })
	}
	if r.c.debugListen != "" {
		addr, stop, err := debugsrv.Serve(r.c.debugListen)
		if err != nil {
			return closeAll, fmt.Errorf("-debug-listen: %w", err)
		}
		closers = append(closers, stop)
		r.logger.Info("debug endpoints", "listen", addr)
	}
	return closeAll, nil
}

// build sets up the export, the tracker and the proxy; on error it shuts
// down what it had set up.
func (r *proxyRun) build(ctx context.Context, stdout io.Writer) (err error) {
	c := r.c
	cfg := otelconf.Config{ServiceName: "llmtrace-proxy", Prometheus: r.ml != nil}
	if r.spanDump, err = spansOut(c.spansOut, stdout); err != nil {
		return fmt.Errorf("-spans-out: %w", err)
	}
	if r.spanDump != nil {
		cfg.SpanProcessors = append(cfg.SpanProcessors, r.spanDump)
	}
	if r.prov, err = otelconf.Setup(ctx, cfg); err != nil {
		return fmt.Errorf("telemetry setup: %w", err)
	}
	defer func() {
		if err != nil {
			if r.tracker != nil {
				_ = r.tracker.Shutdown(context.Background())
			}
			_ = r.prov.Shutdown(context.Background())
		}
	}()
	// The outputs open before the upstream is asked for its models (up to
	// -models-wait): a file that cannot be created fails the start at once.
	if c.statsOut != "" {
		if r.sink, err = openStatsSink(c.statsOut, stdout, true); err != nil {
			return fmt.Errorf("-stats-out: %w", err)
		}
	}
	transport := openaihttp.NewTransport(c.transport)
	opts := append(r.prov.TrackerOptions(), otelstats.WithTrustParentSampling(c.trust), otelstats.WithAutoSweep(time.Second))
	if models := proxyModels(ctx, c, transport, r.logger); len(models) > 0 {
		opts = append(opts, otelstats.WithModels(models...))
	}
	if c.statsLog > 0 {
		opts = append(opts, otelstats.WithStatsLog(r.logger, c.statsLog))
	}
	if r.sink != nil {
		opts = append(opts, otelstats.WithOnFinish(r.sink.write))
	}
	if r.tracker, err = otelstats.NewTracker(opts...); err != nil {
		return err
	}
	r.p, err = openaihttp.NewProxy(c.upstream, r.tracker, c.proxyOptions(r.prov, transport, r.logger)...)
	return err
}

// serve serves until ctx ends (or a server fails), then drains.
func (r *proxyRun) serve(ctx context.Context, ready func(addr string)) (err error) {
	// Every request's context derives from base, so that the cut at the
	// drain's end also ends the requests' upstream calls (and upgraded
	// connections, which Shutdown does not track); handlers counts the
	// handlers still running, which must record their requests' ends
	// before the tracker shuts down.
	base, cutAll := context.WithCancel(context.Background())
	defer cutAll()
	var handlers inFlight
	c := r.c
	srv := &http.Server{Handler: handlers.wrap(r.p), ReadHeaderTimeout: c.readHeaderTimeout, ReadTimeout: c.readTimeout,
		IdleTimeout: orNone(c.idleTimeout), MaxHeaderBytes: c.maxHeaderBytes, ConnState: r.l.ConnState,
		BaseContext: func(net.Listener) context.Context { return base }}
	httpproto.Configure(srv)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(r.l) }()
	var msrv *http.Server
	if r.ml != nil {
		msrv = &http.Server{Handler: r.prov.MetricsHandler, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- msrv.Serve(r.ml) }()
	}
	r.logger.Info("proxying", "listen", r.l.Addr().String(), "upstream", c.upstream.String())
	if ready != nil {
		ready(r.l.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("serving: %w", err)
	}
	r.drain(srv, &handlers, cutAll)
	if msrv != nil {
		_ = msrv.Close()
	}
	r.p.CloseIdleConnections()
	if st := r.l.Stats(); st.Refused+st.Evicted > 0 {
		r.logger.Warn("client connections over -max-conns", "evicted_idle", st.Evicted, "refused", st.Refused)
	}
	return err
}

// drain lets running requests finish within -drain, then cuts the rest,
// and waits for their handlers to return.
func (r *proxyRun) drain(srv *http.Server, handlers *inFlight, cutAll func()) {
	sctx, cancel := context.WithTimeout(context.Background(), r.c.drain)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		r.p.Closing() // the streams cut now end as unfinished, not aborted
		cutAll()
		_ = srv.Close()
	} else if handlers.n.Load() > 0 {
		r.p.Closing() // hijacked (upgraded) connections: Shutdown leaves them
		cutAll()
	}
	// Close does not wait for the handlers it cut: their requests' ends
	// (the tokens they delivered, the time of the cut) are recorded as
	// they return, and the tracker's Shutdown would otherwise end those
	// requests first, at their last known time.
	if !handlers.wait(handlerExitWait) {
		r.logger.Warn("handlers still running after the cut", "n", handlers.n.Load())
	}
}

// flushAtExit ends the requests still open and writes out what they
// recorded: the local files first, then the export, each within its bound.
func (r *proxyRun) flushAtExit() {
	fctx, cancel := context.WithTimeout(context.Background(), exitFlushWait)
	defer cancel()
	// No handler runs any more: the requests the tracker ends now may wait
	// for the files rather than lose their lines.
	r.sink.waitWhenFull(fctx)
	r.spanDump.WaitWhenFull(fctx)
	_ = r.tracker.Shutdown(fctx)
	// The local files before the export, each within its own bound: an
	// endpoint that is down or silent may take the export's whole bound,
	// and the providers' Shutdown skips the -spans-out processor once it
	// has passed. No span ends any more: the handlers have returned and
	// the tracker is shut down.
	var sinkErr, spansErr error
	if r.sink != nil {
		sinkErr = closeWithin(exitFlushWait, r.sink.close)
	}
	if r.spanDump != nil {
		spansErr = closeWithin(exitFlushWait, r.spanDump.Shutdown)
	}
	if serr := r.prov.Shutdown(fctx); serr != nil {
		r.logger.Warn("export", "err", serr)
	}
	if spansErr != nil {
		r.logger.Warn("-spans-out", "err", spansErr)
	}
	if n := r.spanDump.Dropped(); n > 0 {
		r.logger.Warn("-spans-out", "err", fmt.Sprintf("%d spans dropped: the reader did not keep up", n))
	}
	if sum := r.prov.Summary(); sum != "" {
		r.logger.Info("export summary: " + sum)
	}
	if sinkErr != nil {
		r.logger.Warn("-stats-out", "err", sinkErr)
	}
}

// orNone is -idle-timeout's value for http.Server, which reads 0 as
// ReadTimeout's: 0 is no bound, as -read-timeout's 0 is. (A header timeout
// of 0 stays ReadTimeout's: none would let a client that never ends its
// headers hold the connection for ever.)
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// exitFlushWait bounds each part of a command's exit flush: the tracker
// and the export together, and each local output (-stats-out, -spans-out).
var exitFlushWait = 10 * time.Second

// closeWithin calls shut with a context that ends after d of its own.
func closeWithin(d time.Duration, shut func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return shut(ctx)
}

func (c *proxyConfig) proxyOptions(prov *otelconf.Providers, t http.RoundTripper, logger *slog.Logger) []openaihttp.Option {
	opts := []openaihttp.Option{
		openaihttp.WithTracerProvider(prov.TracerProvider), openaihttp.WithMeterProvider(prov.MeterProvider),
		openaihttp.WithTransport(t), openaihttp.WithStallPolicy(c.stall), openaihttp.WithLogger(logger),
		openaihttp.WithTrustIncomingSampling(c.trust), openaihttp.WithServerTiming(c.serverTiming),
		openaihttp.WithBodyBudget(c.bodyBudget), openaihttp.WithEventLimit(c.eventLimit),
	}
	if c.public {
		opts = append(opts, openaihttp.WithPublicEndpoint())
	}
	for _, r := range c.routes {
		opts = append(opts, openaihttp.WithRoute(r.path, r.operation))
	}
	if pr := prov.Propagator(); pr != nil {
		opts = append(opts, openaihttp.WithPropagators(pr))
	}
	if sp, res, ok := prov.SpanExport(); ok {
		// The proxy's spans straight to the export, as the tracker's.
		opts = append(opts, openaihttp.WithSpanProcessor(sp), openaihttp.WithResource(res))
	}
	return opts
}

// proxyModels decides which models keep their own metric series: -models,
// else what the upstream's /v1/models lists (asked until -models-wait
// passes: the engine may be starting beside us), and openaihttp's
// UnknownModel beside them. Without either, the tracker's default: the
// first 64 models whose requests succeed (junk names get a 404, so they
// never earn one).
func proxyModels(ctx context.Context, c *proxyConfig, t http.RoundTripper, logger *slog.Logger) []string {
	models := c.models
	if len(models) == 0 && c.modelsWait > 0 {
		wctx, cancel := context.WithTimeout(ctx, c.modelsWait)
		defer cancel()
		client := &http.Client{Transport: t, Timeout: 5 * time.Second}
		var err error
		for {
			if models, err = openaihttp.UpstreamModels(wctx, client, c.upstream); err == nil {
				logger.Info("models from the upstream", "models", models)
				break
			}
			select {
			case <-wctx.Done():
				logger.Warn("no model list from the upstream; the first 64 models whose requests succeed keep their own metric series (set -models)", "err", err)
				return nil
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	if len(models) == 0 {
		return nil
	}
	return append(models, openaihttp.UnknownModel)
}

// spansOut adds the -spans-out writer to cfg; its lines reach the file
// within a second (lineout); closeSpans writes the rest and closes the file
// (nil without -spans-out), once no span can end any more: the providers'
// Shutdown would too, unless the export took its whole bound first.
// dropped says how many spans a reader that did not keep up cost.
func spansOut(name string, stdout io.Writer) (*spanlog.Processor, error) {
	if name == "" {
		return nil, nil
	}
	w := stdout
	if name != "-" {
		f, err := os.Create(name)
		if err != nil {
			return nil, err
		}
		w = f
	}
	return spanlog.New(w, w != stdout), nil
}

// handlerExitWait bounds how long the proxy waits, after cutting the
// requests still running at the drain's end, for their handlers to return.
const handlerExitWait = 5 * time.Second

// inFlight counts the handlers running.
type inFlight struct{ n atomic.Int64 }

func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.n.Add(1)
		defer f.n.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// wait polls until no handler runs or d passes; it reports whether none
// runs.
func (f *inFlight) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for f.n.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
