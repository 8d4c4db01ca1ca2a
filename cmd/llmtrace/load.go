package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/internal/loadgen"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func init() {
	commands["load"] = command{
		summary: "drive the tracker as fast as asked with OTLP export; report requests/s, spans/s, drops and step latency",
		run: untilSignal(func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			keepServingOnBrokenPipe() // `load … | head -1`: the run still ends with its flush and totals
			return load(ctx, args, stdin, stdout, stderr)
		}),
	}
}

// load runs one load level (or a -find-max ramp): flags → loadgen.Options →
// loadgen.Measure. One summary line per level on stdout, progress on
// stderr.
func load(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	o, code, ok := loadFlags(args, stderr)
	if !ok {
		return code
	}
	out := &stickyWriter{w: stdout}
	o.Stdout, o.Stderr = out, stderr
	err := loadgen.Measure(ctx, o)
	var bad *otelconf.ConfigError
	switch {
	case errors.Is(err, loadgen.ErrNoTraceExport) || errors.As(err, &bad):
		fmt.Fprintf(stderr, "llmtrace load: %v\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "llmtrace load: %v\n", err)
		return 1
	case out.err != nil:
		// `load … | head -1`: the lines are the measurement; losing them
		// is a failure to say, as replay says it, not a silent success.
		fmt.Fprintf(stderr, "llmtrace load: stdout: %v (%d result line(s) lost)\n", out.err, out.lost)
		return 1
	}
	return 0
}

// stickyWriter keeps the first write error and counts the writes lost
// from it on (a reader gone away), for load to report at its end.
type stickyWriter struct {
	mu   sync.Mutex
	w    io.Writer
	err  error
	lost int
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		var n int
		if n, s.err = s.w.Write(p); s.err == nil {
			return n, nil
		}
	}
	s.lost++
	return 0, s.err
}

// loadFlags parses and checks load's flags. When ok is false the command
// ends with code (the reason is on stderr).
func loadFlags(args []string, stderr io.Writer) (o loadgen.Options, code int, ok bool) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &o.Level
	fs.StringVar(&o.Endpoint, "endpoint", "", "OTLP receiver for traces, host:port (plaintext) or a URL; overrides OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT and OTEL_TRACES_EXPORTER")
	fs.Float64Var(&c.Rate, "rate", 1000, "offered requests/s, paced regardless of completions (open loop); 0: flat out, the batch kept full, no model time")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long requests arrive (per level with -find-max)")
	fs.IntVar(&c.InFlight, "in-flight", 256, "batch size: requests running at once")
	fs.IntVar(&c.PromptTokens, "prompt-tokens", 128, "prompt tokens per request (one prefill chunk)")
	fs.IntVar(&c.OutputTokens, "output-tokens", 16, "output tokens per request (one engine step each)")
	fs.DurationVar(&c.StepTime, "step-time", time.Millisecond, "simulated model time per engine step with -rate > 0")
	fs.IntVar(&c.MaxWaiting, "max-waiting", 0, "bound of the engine's waiting queue; arrivals beyond it are shed and counted (0: 16 × -in-flight)")
	fs.BoolVar(&o.FindMax, "find-max", false, "search for the highest rate with zero drops: start at -rate, double, then bisect to 10 %")
	fs.IntVar(&o.MaxLevels, "levels", 10, "most levels -find-max runs")
	fs.DurationVar(&o.Progress, "progress", time.Second, "interval of the progress line on stderr (0: off)")
	fs.BoolVar(&o.Metrics, "metrics", false, "also export metrics as OTEL_* says (off by default: load measures span export)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace load [-endpoint HOST:PORT] [-rate N] [-duration D] [-find-max] [flags]\n\n"+
			"Drives a tracker as an engine loop would — arrivals, schedule and output steps,\n"+
			"the frontend's detokenized deliveries and finish — with OTLP trace export\n"+
			"(OTEL_EXPORTER_OTLP_* and OTEL_BSP_* apply), and reports offered and completed\n"+
			"requests/s, spans/s produced and exported, spans dropped and the engine loop's\n"+
			"step latency. A level is sustained when nothing was dropped, shed or rejected\n"+
			"and at most one batch waited at its end. One line per level on stdout, then\n"+
			"the totals (produced = exported + dropped):\n"+
			"  llmtrace-load key=value ...\n"+
			"An interrupt stops the level and the flush; a second one exits at once.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 2); !ok {
		return o, code, false
	}
	usageErr := func(format string, a ...any) (loadgen.Options, int, bool) {
		fmt.Fprintf(stderr, "llmtrace load: "+format+"\n", a...)
		return o, 2, false
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case !(c.Rate >= 0) || math.IsInf(c.Rate, 1): // NaN fails ≥ too
		return usageErr("-rate must be a finite number ≥ 0 (got %v)", c.Rate)
	case !endpointPortOK(o.Endpoint):
		// A port out of range passed as host:port: every export then
		// failed at its dial, each span dropped, the run measuring nothing.
		return usageErr("-endpoint %q: the port is out of range (1-65535)", o.Endpoint)
	case c.InFlight > otelstats.DefaultMaxInFlight:
		// The tracker ends the oldest request past its cap: a bigger batch
		// measures evictions, and -rate 0 (the batch kept full) held every
		// request of it in memory: -in-flight 200000000 died out of memory.
		return usageErr("-in-flight is at most %d, the tracker's cap on requests in flight (got %d)", otelstats.DefaultMaxInFlight, c.InFlight)
	case c.Duration <= 0 || c.InFlight <= 0 || c.PromptTokens <= 0 || c.OutputTokens <= 0 || c.StepTime < 0 || c.MaxWaiting < 0 || o.MaxLevels <= 0 || o.Progress < 0:
		return usageErr("-step-time, -max-waiting, -progress must be ≥ 0; -duration, -in-flight, -prompt-tokens, -output-tokens, -levels > 0")
	}
	return o, 0, true
}

// endpointPortOK reports whether -endpoint's port, when it has one, can be
// dialled; the endpoint's form is otelconf's to check.
func endpointPortOK(ep string) bool {
	var port string
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return true
		}
		port = u.Port()
	} else if _, p, err := net.SplitHostPort(ep); err == nil {
		port = p
	}
	return validPort(port)
}
