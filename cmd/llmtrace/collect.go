package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
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
		run: untilSignal(func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			keepServingOnBrokenPipe()
			return collect(ctx, args, stdin, stdout, stderr)
		}),
	}
}

// envToken names the variable collect reads the shared token from when
// -token-file is not given.
const envToken = "LLMTRACE_COLLECTOR_TOKEN"

// Memory sizing of the tracker's in-flight cap. bytesPerInFlight is what
// one request in flight may cost collect's resident memory: measured
// through the built binary at 1,227 bytes (e2e/cli
// TestCollectMemoryPerInFlight: 50,000 then 150,000 requests held open mid
// decode, the RSS difference over the 100,000 more; that test fails when
// the measurement exceeds this constant), plus a quarter again for heavier
// requests (512-byte ids, sampling params, several decode segments). The
// default cap is the budget over it: 349,525 requests.
const (
	bytesPerInFlight    = 1536
	defaultMemoryBudget = 512 << 20
)

// Upper bounds of -queue and -workers: 64 times the default queue (about
// 1 GiB allocated at start), and far more recording goroutines than any
// machine runs at once.
const (
	maxQueue   = 64 * transport.DefaultQueueSize
	maxWorkers = 1024
)

// collectConfig is what collect's flags ask for.
type collectConfig struct {
	server      transport.ServerConfig
	tokenFile   string
	prometheus  bool
	grace, hold time.Duration
	clockAhead  time.Duration
	maxInFlight int
	statsOut    string
	spansOut    string
	statsLog    time.Duration
	verbose     bool
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// byteSize is a flag of bytes: 1048576, 512KiB, 64MiB, 2GiB (KB, MB, GB
// are read as the same powers of two).
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.m
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive size (like 512MiB)", s)
	}
	return n * mult, nil
}

// collect runs until ctx ends, or until stdin ends when stdin is its only
// input.
func collect(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, code, ok := parseCollect(args, stdin, stderr)
	if !ok {
		return code
	}
	return runCollect(ctx, cfg, stdout, stderr)
}

// parseCollect turns collect's flags into its config; a usage error is
// reported and ok is false.
func parseCollect(args []string, stdin io.Reader, stderr io.Writer) (cfg collectConfig, code int, ok bool) {
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var listen listFlag
	sc := &cfg.server
	cc := &sc.Collector
	budget := byteSize(defaultMemoryBudget)
	maxBody := byteSize(transport.DefaultMaxBody)
	fs.Var(&listen, "listen", "where producers connect: unix:PATH, tcp:127.0.0.1:PORT, or - for stdin (repeatable)")
	fs.StringVar(&sc.HTTPAddr, "http", "", "serve POST /v1/updates (JSON lines or binary) and /healthz on this address (loopback unless -allow-remote)")
	fs.BoolVar(&cfg.prometheus, "prometheus", false, "also serve the metrics on -http at /metrics")
	fs.BoolVar(&cc.AlignClocks, "align-clocks", false, "map every producer onto this process's wall clock at its HELLO (same-host producers with skewed clocks)")
	fs.BoolVar(&sc.AllowRemote, "allow-remote", false, "allow -listen tcp: and -http addresses that are not loopback (give a token too)")
	fs.StringVar(&cfg.tokenFile, "token-file", "", "require this file's first line as the shared token from TCP and HTTP producers (default: $"+envToken+" when set)")
	fs.IntVar(&cc.MaxConns, "max-conns", transport.DefaultMaxConns, "producer connections open at once (streams and HTTP); beyond it the oldest that has not presented the token (without one: a HELLO or update) is closed, counted as evicted, else the newcomer, counted as refused")
	fs.DurationVar(&cc.IdleTimeout, "idle-timeout", transport.DefaultIdleTimeout, "close a producer connection that sends nothing for this long (0 or negative: never)")
	fs.Var(&maxBody, "max-body", "largest POST /v1/updates body (what precedes the limit is recorded; the rest answered 413)")
	fs.IntVar(&cc.QueueSize, "queue", transport.DefaultQueueSize, "updates decoded but not yet recorded; beyond it updates are dropped and counted")
	fs.IntVar(&cc.Workers, "workers", transport.DefaultWorkers, "goroutines recording into the tracker")
	fs.Var(&budget, "memory-budget", "memory for requests in flight; sets the in-flight cap at this over "+strconv.Itoa(bytesPerInFlight)+" bytes a request")
	fs.IntVar(&cfg.maxInFlight, "max-in-flight", 0, "requests in flight at most; at the cap an arrival evicts the oldest (default: from -memory-budget)")
	fs.DurationVar(&cfg.grace, "grace", otelstats.DefaultFrontendGrace, "how long a request one side finished waits for the other side's FINISHED")
	fs.DurationVar(&cfg.hold, "hold", otelstats.DefaultHoldWindow, "how long an update may precede its request's ARRIVED")
	fs.DurationVar(&cfg.clockAhead, "max-clock-ahead", otelstats.DefaultMaxClockAhead, "reject (bad_timestamp) an update further ahead of this process's clock: a producer with a skewed clock")
	fs.StringVar(&cfg.statsOut, "stats-out", "", "write one RequestStats JSON object per finished request to FILE (- for stdout)")
	fs.StringVar(&cfg.spansOut, "spans-out", "", "write every span as a JSON line to FILE (- for stdout)")
	fs.DurationVar(&cfg.statsLog, "stats-log", 10*time.Second, "interval of the vLLM-style stats line on stderr (0: off)")
	fs.BoolVar(&cfg.verbose, "v", false, "log every rejected update")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace collect -listen unix:PATH|tcp:127.0.0.1:PORT|- [-listen …] [-http ADDR] [flags]\n\n"+
			"Reads lifecycle updates from engines in other processes — JSON lines (the update\n"+
			"log, plus HELLO and mono_ts) or the binary encoding of transport (go doc\n"+
			"github.com/llmtrace/llmtrace/transport) — and turns them into traces and\n"+
			"metrics (OTLP when OTEL_* is set). Runs until interrupted, or until stdin ends\n"+
			"when stdin is the only input. Times are live: requests idle for 10 minutes end\n"+
			"as abandoned; for a recorded log use llmtrace replay.\n\n"+
			"Exit status: 0 stopped cleanly, 1 could not start or serve, 2 usage error.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, exitUsage); !ok {
		return cfg, code, false
	}
	bad := func(format string, a ...any) (collectConfig, int, bool) {
		return cfg, usageError(fs, format, a...), false
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (addresses go after -listen)", fs.Arg(0))
	case len(listen) == 0 && sc.HTTPAddr == "":
		return bad("no input: give -listen unix:PATH, -listen tcp:127.0.0.1:PORT, -listen - (stdin) or -http ADDR")
	case cfg.prometheus && sc.HTTPAddr == "":
		return bad("-prometheus serves /metrics on the -http server: give -http ADDR too")
	case cc.MaxConns <= 0 || cc.QueueSize <= 0 || cc.Workers <= 0:
		return bad("-max-conns, -queue and -workers must be positive")
	case cc.QueueSize > maxQueue || cc.Workers > maxWorkers:
		// The queue's slots are allocated at start, each a decoded update
		// (some 250 bytes): -queue 20000000 was a 4.9 GB allocation and a
		// runtime crash; every stream's end waits on each worker.
		return bad("-queue is at most %d (its slots, about 250 bytes each, are allocated at start) and -workers at most %d", maxQueue, maxWorkers)
	case cfg.maxInFlight < 0:
		return bad("-max-in-flight must be positive (0: from -memory-budget)")
	case cfg.statsLog < 0:
		return bad("-stats-log must be ≥ 0")
	case cfg.clockAhead <= 0 || cfg.grace < 0 || cfg.hold < 0:
		return bad("-max-clock-ahead must be positive, -grace and -hold ≥ 0")
	case sameFile(cfg.statsOut, cfg.spansOut):
		return bad("-stats-out and -spans-out name one file, %s: each writes its own", cfg.statsOut)
	}
	for _, l := range listen {
		if l == "-" || l == "stdin" {
			sc.Stdin = stdin
			continue
		}
		a, err := transport.ParseAddr(l)
		if err != nil {
			// The cause, when ParseAddr has one (a bad port); an address
			// of no known form has none, and said "(<nil>)".
			if cause := errors.Unwrap(err); cause != nil {
				return bad("-listen %q: want unix:PATH, tcp:HOST:PORT or - (%v)", l, cause)
			}
			return bad("-listen %q: want unix:PATH, tcp:HOST:PORT or -", l)
		}
		sc.Listen = append(sc.Listen, a)
	}
	if sc.HTTPAddr != "" {
		// As -listen tcp:'s: a port out of range, or none, is the user's
		// mistake to name, not a failure to listen (nor, for "bogus", an
		// address "not on loopback").
		if _, err := transport.ParseAddr("tcp:" + sc.HTTPAddr); err != nil {
			return bad("-http %q: want HOST:PORT (%v)", sc.HTTPAddr, errors.Unwrap(err))
		}
	}
	if cc.IdleTimeout == 0 {
		// transport reads 0 as its default, 2 min: a user who wrote 0
		// meant none, as the proxy's -idle-timeout 0 is.
		cc.IdleTimeout = -1
	}
	cc.MaxBody = int64(maxBody)
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = max(int(int64(budget)/bytesPerInFlight), 1)
	}
	return cfg, 0, true
}

// loadToken returns the shared token: -token-file's first line, else the
// environment's.
func loadToken(file string, getenv func(string) string) (tok, from string, err error) {
	if file != "" {
		line, err := firstLine(file)
		if err != nil {
			return "", "", fmt.Errorf("-token-file: %w", err)
		}
		tok = strings.TrimSpace(line)
		if tok == "" {
			return "", "", fmt.Errorf("-token-file %s: the first line is empty", file)
		}
		from = file
	} else if tok = strings.TrimSpace(getenv(envToken)); tok != "" {
		from = "$" + envToken
	}
	if len(tok) > transport.MaxTokenLen {
		return "", "", fmt.Errorf("the token from %s is longer than %d bytes", from, transport.MaxTokenLen)
	}
	return tok, from, nil
}

// maxTokenLine bounds what -token-file reads: its first line, up to this.
const maxTokenLine = 64 << 10

// firstLine reads the file's first line, without reading on past it or
// past maxTokenLine: a file named by mistake (/dev/zero, /dev/urandom, a
// FIFO, a huge log) was read whole, and /dev/zero took all the memory.
func firstLine(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, maxTokenLine).ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", fmt.Errorf("%s: no line end in the first %d bytes: not a token file", name, maxTokenLine)
	case err != nil && err != io.EOF:
		return "", err
	}
	return strings.TrimSuffix(string(line), "\n"), nil
}

// collectRun is what runCollect sets up around the server, to take down in
// order.
type collectRun struct {
	log      *slog.Logger
	stderr   io.Writer
	prov     *otelconf.Providers
	spanDump *spanlog.Processor
	sink     *statsSink
	tr       *otelstats.Tracker
	// col is the collector feeding tr, once it exists: the tracker's late
	// rejections (held updates) are its to count.
	col atomic.Pointer[transport.Collector]
}

func (r *collectRun) fail(format string, a ...any) int {
	fmt.Fprintf(r.stderr, "llmtrace collect: "+format+"\n", a...)
	return 1
}

// runCollect serves cfg until ctx ends and returns the exit status.
func runCollect(ctx context.Context, cfg collectConfig, stdout, stderr io.Writer) int {
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	r := &collectRun{log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), stderr: stderr}
	tok, from, err := loadToken(cfg.tokenFile, os.Getenv)
	if err != nil {
		return r.fail("%v", err)
	}
	cfg.server.Collector.Token = tok
	if tok != "" {
		r.log.Info("producers over TCP and HTTP must present the token", "from", from)
	} else if cfg.server.AllowRemote {
		r.log.Warn("-allow-remote without a token: any host that reaches the collector can send it updates", "hint", "-token-file FILE or $"+envToken)
	}
	if err := r.setup(ctx, &cfg, stdout); err != nil {
		r.teardown()
		code := r.fail("%v", err)
		// An OTEL_* value no exporter can use is the user's to fix, as a
		// bad flag is: the usage status, as the proxy and load give it.
		var bad *otelconf.ConfigError
		if errors.As(err, &bad) {
			code = 2
		}
		return code
	}
	sc := cfg.server
	sc.Collector.Tracker = r.tr
	sc.Collector.Logger = r.log
	sc.Collector.MeterProvider = r.prov.MeterProvider
	if r.prov.MetricsHandler != nil {
		sc.Handlers = map[string]http.Handler{"/metrics": r.prov.MetricsHandler}
	}
	srv, err := transport.NewServer(sc)
	if err != nil {
		r.teardown()
		if errors.Is(err, transport.ErrNotLoopback) {
			return r.fail("%v\n(listen on 127.0.0.1 or [::1]; for other hosts add -allow-remote and -token-file)", err)
		}
		return r.fail("%v", err)
	}
	r.col.Store(srv.Collector())
	status := 0
	if err := srv.Run(ctx); err != nil {
		r.log.Error("collector", "err", err)
		status = 1
	}
	if err := r.teardown(); err != nil {
		status = r.fail("%v", err)
	}
	st := srv.Collector().Stats()
	r.log.Info("collector stopped", "streams", st.Streams, "updates", st.Updates, "recorded", st.Recorded,
		"rejected", st.Rejected, "dropped", st.Dropped, "malformed", st.Malformed, "truncated", st.Truncated,
		"oversized", st.Oversized, "garbage", st.Garbage, "no_anchor", st.NoAnchor, "refused", st.Refused,
		"evicted", st.Evicted, "unauthorized", st.Unauthorized, "timed_out", st.TimedOut, "accept_errors", st.AcceptErrors)
	return status
}

// setup opens the outputs, the providers and the tracker.
func (r *collectRun) setup(ctx context.Context, cfg *collectConfig, stdout io.Writer) error {
	oc := otelconf.Config{ServiceName: "llmtrace-collect", Prometheus: cfg.prometheus}
	var err error
	if r.spanDump, err = spansOut(cfg.spansOut, stdout); err != nil {
		return fmt.Errorf("-spans-out: %w", err)
	}
	if r.spanDump != nil {
		oc.SpanProcessors = []sdktrace.SpanProcessor{r.spanDump}
	}
	if r.prov, err = otelconf.Setup(ctx, oc); err != nil {
		return fmt.Errorf("telemetry setup: %w", err)
	}
	if cfg.statsOut != "" {
		if r.sink, err = openStatsSink(cfg.statsOut, stdout, false); err != nil {
			return fmt.Errorf("-stats-out: %w", err)
		}
	}
	opts := append(r.prov.TrackerOptions(),
		otelstats.WithFrontendGrace(cfg.grace),
		otelstats.WithHoldWindow(cfg.hold),
		otelstats.WithMaxInFlight(cfg.maxInFlight),
		// Live: waits, holds and TTLs run on the tracker's own clock, never
		// on times taken from input (replay, without it, keeps the log's).
		otelstats.WithAutoSweep(100*time.Millisecond),
		otelstats.WithMaxClockAhead(cfg.clockAhead),
		// An update held for its ARRIVED and rejected later: the collector
		// counted it recorded when the tracker held it.
		otelstats.WithOnReject(func(e *otelstats.RejectError) {
			if c := r.col.Load(); c != nil {
				c.HeldRejected(e) // logs it too
				return
			}
			r.log.Debug("update rejected", "err", e)
		}),
	)
	if cfg.statsLog > 0 {
		opts = append(opts, otelstats.WithStatsLog(r.log, cfg.statsLog))
	}
	if r.sink != nil {
		opts = append(opts, otelstats.WithOnFinish(r.sink.write))
	}
	r.tr, err = otelstats.NewTracker(opts...)
	return err
}

// teardown ends what setup opened, in order: the tracker (what is in
// flight ends as unfinished), the local outputs, the providers (export).
// The outputs go before the export, each within its own bound: an OTLP
// endpoint that is down or silent may take the export's whole bound, and
// the providers' Shutdown skips the -spans-out processor once it passed.
func (r *collectRun) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), exitFlushWait)
	defer cancel()
	if r.tr != nil {
		r.tr.Flush()
		// The producers are gone: the requests the tracker ends now may
		// wait for the files rather than lose their lines.
		r.sink.waitWhenFull(ctx)
		r.spanDump.WaitWhenFull(ctx)
		_ = r.tr.Shutdown(ctx)
	}
	errs := r.closeOutputs()
	if r.prov != nil {
		if err := r.prov.Shutdown(ctx); err != nil {
			r.log.Warn("export", "err", err)
		}
		if sum := r.prov.Summary(); sum != "" {
			r.log.Info("export summary: " + sum)
		}
	}
	return errors.Join(errs...)
}

// closeOutputs writes out and closes -spans-out and -stats-out, each
// within exitFlushWait of its own.
func (r *collectRun) closeOutputs() []error {
	var errs []error
	if r.spanDump != nil {
		if err := closeWithin(exitFlushWait, r.spanDump.Shutdown); err != nil {
			errs = append(errs, fmt.Errorf("-spans-out: %w", err))
		} else if n := r.spanDump.Dropped(); n > 0 {
			errs = append(errs, fmt.Errorf("-spans-out: %d spans dropped: the reader did not keep up", n))
		}
	}
	if r.sink != nil {
		if err := closeWithin(exitFlushWait, r.sink.close); err != nil {
			errs = append(errs, fmt.Errorf("-stats-out: %w", err))
		}
	}
	return errs
}
