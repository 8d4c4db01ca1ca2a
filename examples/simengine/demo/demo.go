// Package demo is examples/simengine's program: it loads a workload, wires
// the simulated engine to an otelstats.Tracker through the providers
// internal/otelsetup builds from the OTEL_* environment, and prints the
// stats lines, the summary table and three request waterfalls. The main
// package only parses flags, so tests run the whole demo in-process.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/examples/simengine/sim"
	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Workload names that are not files.
const (
	WorkloadDefault   = ""          // the conversation trace if present, else synthetic
	WorkloadSynthetic = "synthetic" // the built-in Poisson workload
)

// Epoch choices besides an RFC 3339 time.
const (
	EpochAuto  = "auto"
	EpochTrace = "trace"
)

// Options configure a run.
type Options struct {
	// Workload is a CSV path, WorkloadSynthetic or WorkloadDefault.
	Workload string
	// Requests replays the first N requests (0: all).
	Requests int
	// RateScale multiplies the arrival rate.
	RateScale float64
	// SyntheticRate is the synthetic workload's arrival rate (req/s).
	SyntheticRate float64
	// Seed drives the synthetic workload and the engine's choices.
	Seed uint64
	// Epoch places the replay in time: EpochAuto (the default), EpochTrace
	// (the workload's own timestamps) or an RFC 3339 time for the first
	// arrival. Auto is "now" when pacing in real time, "now minus the
	// replay's arrival span" when traces are exported (so they land in
	// Jaeger's default lookback), else the workload's own timestamps.
	Epoch string

	// Engine is the simulated engine. Its Seed, Realtime and Speedup are
	// set from the options above and below.
	Engine   sim.Config
	Realtime bool
	Speedup  float64

	// StatsInterval is the period of the stats line in simulated time.
	StatsInterval time.Duration
	// HTML, when set, is where the HTML report goes.
	HTML string
	// MetricsAddr serves Prometheus /metrics there during the run;
	// MetricsListener (tests) serves on a listener already open.
	MetricsAddr     string
	MetricsListener net.Listener
	// Linger keeps /metrics served this long after the run (or until ctx
	// ends), so Prometheus can scrape the final values.
	Linger time.Duration
	// Progress prints progress lines on Stderr during long runs.
	Progress bool
	// Sampling is an end-of-request sampling policy in LLMTRACE_SAMPLING's
	// syntax (otelstats.ParseSamplingPolicy); empty keeps every trace.
	Sampling string
	// ServiceName is the default service.name.
	ServiceName string

	Stdout, Stderr io.Writer

	// SpanProcessors are added to the TracerProvider beside the demo's own
	// capture (tests count what was exported).
	SpanProcessors []sdktrace.SpanProcessor
	// OnFinish sees every finished request's stats (tests).
	OnFinish func(*otelstats.RequestStats)
	// OnDone runs after the report is printed, while /metrics is still
	// served (tests).
	OnDone func(*Report)
}

// DefaultOptions are the command's defaults.
func DefaultOptions() Options {
	return Options{
		Requests:      2000,
		RateScale:     1,
		SyntheticRate: 5,
		Seed:          1,
		Epoch:         EpochAuto,
		Engine:        sim.DefaultConfig(),
		Speedup:       1,
		StatsInterval: 30 * time.Second,
		Progress:      true,
		ServiceName:   "simengine",
	}
}

// Report is what a run produced.
type Report struct {
	Workload   *workload.Workload
	Result     *sim.Result
	Summary    *summary.Collector
	Waterfalls []*waterfall.Waterfall
	// TracesExported and MetricsExported say whether OTLP export was on.
	TracesExported, MetricsExported bool
	// MetricsURL is the Prometheus endpoint, if served.
	MetricsURL string
	Wall       time.Duration
	// StatsLines counts the stats lines printed.
	StatsLines int
	// Kept counts finished requests by sampling reason
	// (otelstats.SampledAll when no policy is set).
	Kept map[string]int
}

// Run runs the demo.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.RateScale == 0 {
		o.RateScale = 1
	}
	if o.StatsInterval <= 0 {
		o.StatsInterval = 30 * time.Second
	}
	wallStart := time.Now()
	w, err := loadWorkload(o)
	if err != nil {
		return nil, err
	}
	cfg := o.Engine
	cfg.Seed, cfg.Realtime, cfg.Speedup = o.Seed, o.Realtime, o.Speedup
	if err := cfg.Validate(); err != nil {
		return nil, err
	}

	policy, err := otelstats.ParseSamplingPolicy(o.Sampling)
	if err != nil {
		return nil, err
	}
	capture := waterfall.NewCapture(64)
	agg := otelstats.NewAggregator()
	prov, err := otelconf.Setup(ctx, otelconf.Config{
		Aggregator:     agg,
		ServiceName:    o.ServiceName,
		SpanProcessors: append([]sdktrace.SpanProcessor{capture}, o.SpanProcessors...),
		Prometheus:     o.MetricsAddr != "" || o.MetricsListener != nil,
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry setup: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := prov.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("flushing telemetry: %w", serr)
		}
	}()
	if err := placeInTime(w, o, prov.TracesExported); err != nil {
		return nil, err
	}

	rep = &Report{Workload: w, TracesExported: prov.TracesExported, MetricsExported: prov.MetricsExported}
	stopServer, err := serveMetrics(o, prov, rep)
	if err != nil {
		return nil, err
	}
	defer stopServer()

	var (
		mu  sync.Mutex
		col summary.Collector
		tr  *otelstats.Tracker
	)
	pick := newPicker(capture, o.Seed)
	t0 := w.Requests[0].Arrival
	logger := slog.New(&statsHandler{w: o.Stdout, t0: t0, stats: func() otelstats.Stats { return tr.LastStats() }, lines: &rep.StatsLines})
	tr, err = otelstats.NewTracker(append(prov.TrackerOptions(),
		otelstats.WithSampling(policy),
		otelstats.WithModels(cfg.Model),
		otelstats.WithStatsLog(logger, o.StatsInterval),
		otelstats.WithTokenLatencies(true),
		// The simulator finishes every request it admits; a request
		// queued for longer than the TTL under an extreme -rate-scale is
		// still alive and must not be ended as abandoned.
		otelstats.WithRequestTTL(0),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			mu.Lock()
			col.Add(s)
			if s.Sampled {
				pick.observe(s)
			}
			if rep.Kept == nil {
				rep.Kept = map[string]int{}
			}
			rep.Kept[s.SamplingReason]++
			mu.Unlock()
			if o.OnFinish != nil {
				o.OnFinish(s)
			}
		}),
	)...)
	if err != nil {
		return nil, err
	}

	printHeader(o, w, cfg, rep)
	if o.Progress {
		cfg.Progress = progressPrinter(o.Stderr, w, wallStart)
	}
	res, err := sim.Run(ctx, cfg, w.Requests, tr)
	if serr := tr.Shutdown(context.WithoutCancel(ctx)); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if res.Rejections > 0 {
		fmt.Fprintf(o.Stderr, "warning: llmtrace rejected %d updates of the simulator; first: %v\n", res.Rejections, res.FirstRejection)
	}
	rep.Result = res
	rep.Wall = time.Since(wallStart)
	mu.Lock()
	rep.Summary = &col
	rep.Waterfalls = pick.waterfalls(&col)
	mu.Unlock()

	printSummary(o.Stdout, rep, cfg)
	printWaterfalls(o.Stdout, rep)
	if o.HTML != "" {
		if err := writeHTML(o.HTML, rep, cfg); err != nil {
			return rep, err
		}
		fmt.Fprintf(o.Stdout, "\nHTML report: %s\n", o.HTML)
	}
	if rep.TracesExported {
		if err := prov.TracerProvider.ForceFlush(ctx); err != nil {
			fmt.Fprintf(o.Stderr, "warning: flushing traces: %v\n", err)
		}
	}
	if o.OnDone != nil {
		o.OnDone(rep)
	}
	if rep.MetricsURL != "" && o.Linger > 0 {
		fmt.Fprintf(o.Stdout, "serving %s for %v more (Ctrl-C to stop)\n", rep.MetricsURL, o.Linger)
		select {
		case <-time.After(o.Linger):
		case <-ctx.Done():
		}
	}
	return rep, nil
}

func loadWorkload(o Options) (*workload.Workload, error) {
	var w *workload.Workload
	switch path := o.Workload; path {
	case WorkloadSynthetic:
		w = workload.Synthetic(max(o.Requests, 0), o.SyntheticRate, o.Seed)
	case WorkloadDefault:
		if p := workload.FindDefault(); p != "" {
			var err error
			if w, err = workload.Load(p); err != nil {
				return nil, err
			}
			break
		}
		n := o.Requests
		if n <= 0 {
			n = 2000
		}
		w = workload.Synthetic(n, o.SyntheticRate, o.Seed)
	default:
		var err error
		if w, err = workload.Load(path); err != nil {
			return nil, err
		}
	}
	w.Head(o.Requests)
	if len(w.Requests) == 0 {
		return nil, errors.New("the workload has no requests")
	}
	if err := w.ScaleRate(o.RateScale); err != nil {
		return nil, err
	}
	return w, nil
}

func placeInTime(w *workload.Workload, o Options, exported bool) error {
	switch e := o.Epoch; e {
	case EpochAuto, "":
		now := time.Now().UTC().Truncate(time.Millisecond)
		switch {
		case o.Realtime:
			w.Shift(now)
		case exported:
			w.Shift(now.Add(-w.Span()))
		}
	case EpochTrace:
	default:
		t, err := time.Parse(time.RFC3339Nano, e)
		if err != nil {
			return fmt.Errorf("epoch %q: want %q, %q or an RFC 3339 time", e, EpochAuto, EpochTrace)
		}
		w.Shift(t.UTC())
	}
	return nil
}

func serveMetrics(o Options, prov *otelconf.Providers, rep *Report) (stop func(), err error) {
	ln := o.MetricsListener
	if ln == nil && o.MetricsAddr == "" {
		return func() {}, nil
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", o.MetricsAddr); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", prov.MetricsHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	host := ln.Addr().String()
	if h, p, err := net.SplitHostPort(host); err == nil && (h == "" || h == "::" || h == "0.0.0.0") {
		host = net.JoinHostPort("localhost", p)
	}
	rep.MetricsURL = "http://" + host + "/metrics"
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// statsHandler prints the tracker's stats line stamped with the simulated
// time it covers (the slog record's own time is the wall clock's).
type statsHandler struct {
	w     io.Writer
	t0    time.Time
	stats func() otelstats.Stats
	lines *int
}

func (h *statsHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *statsHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *statsHandler) WithGroup(string) slog.Handler                { return h }

func (h *statsHandler) Handle(_ context.Context, r slog.Record) error {
	st := h.stats()
	at := st.Time
	if at.IsZero() {
		at = r.Time
	}
	*h.lines++
	_, err := fmt.Fprintf(h.w, "INFO %s [sim +%s] %s\n", at.UTC().Format("01-02 15:04:05"), clock(at.Sub(h.t0)), r.Message)
	return err
}

// clock formats d as h:mm:ss.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

func progressPrinter(out io.Writer, w *workload.Workload, wallStart time.Time) func(sim.Progress) {
	last := time.Now()
	t0 := w.Requests[0].Arrival
	return func(p sim.Progress) {
		if now := time.Now(); now.Sub(last) >= 2*time.Second && p.Done < p.Total {
			last = now
			fmt.Fprintf(out, "progress: %d/%d requests finished (%.0f%%), simulated %s of %s of arrivals, %.1fs wall\n",
				p.Done, p.Total, 100*float64(p.Done)/float64(p.Total), clock(p.Now.Sub(t0)), clock(w.Span()), now.Sub(wallStart).Seconds())
		}
	}
}

func printHeader(o Options, w *workload.Workload, cfg sim.Config, rep *Report) {
	out := o.Stdout
	rate := 0.0
	if s := w.Span().Seconds(); s > 0 {
		rate = float64(len(w.Requests)-1) / s
	}
	src := w.Name
	if o.RateScale != 1 {
		src += fmt.Sprintf(", arrival rate ×%g", o.RateScale)
	}
	fmt.Fprintf(out, "simengine: %d requests from %s (%s of arrivals, %.1f req/s) on a simulated %s\n",
		len(w.Requests), src, clock(w.Span()), rate, cfg.Model)
	fmt.Fprintf(out, "engine: vLLM V1-style continuous batching, %d-token step budget, ≤%d running, chunked prefill,\n"+
		"        KV cache %d blocks × %d tokens with prefix caching, recompute preemption; context %d tokens\n",
		cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs, cfg.NumBlocks, cfg.BlockSize, cfg.MaxModelLen)
	fmt.Fprintf(out, "step time: %v + %v/prefill token + %v/decoding request; ", cfg.Cost.Fixed, cfg.Cost.PerPrefillToken, cfg.Cost.PerDecodeSeq)
	if cfg.Realtime {
		fmt.Fprintf(out, "paced at %g× real time\n", cfg.Speedup)
	} else {
		fmt.Fprintf(out, "virtual clock (use -realtime to pace it)\n")
	}
	var tel []string
	if rep.TracesExported || rep.MetricsExported {
		tel = append(tel, "OTLP export of "+strings.Join(exported(rep), " and "))
	} else {
		tel = append(tel, "no OTLP endpoint (set OTEL_EXPORTER_OTLP_ENDPOINT to export traces and metrics)")
	}
	if rep.MetricsURL != "" {
		tel = append(tel, "Prometheus metrics on "+rep.MetricsURL)
	}
	fmt.Fprintf(out, "telemetry: %s\n\n", strings.Join(tel, "; "))
}

func exported(rep *Report) []string {
	var s []string
	if rep.TracesExported {
		s = append(s, "traces")
	}
	if rep.MetricsExported {
		s = append(s, "metrics")
	}
	return s
}

func printSummary(out io.Writer, rep *Report, cfg sim.Config) {
	res := rep.Result
	fmt.Fprintf(out, "\n── summary: %d requests, %s simulated in %.1fs wall, %d engine steps ──\n",
		rep.Summary.Requests, clock(res.End.Sub(res.Start)), rep.Wall.Seconds(), res.Steps)
	rep.Summary.WriteTable(out)
	fmt.Fprintf(out, "engine: peak batch %d running, peak queue %d waiting\n", res.MaxRunning, res.MaxWaiting)
	if _, all := rep.Kept[otelstats.SampledAll]; !all && len(rep.Kept) > 0 {
		kept, why := 0, []string{}
		for r, n := range rep.Kept {
			if r != otelstats.NotSampled {
				kept += n
				why = append(why, fmt.Sprintf("%s=%d", r, n))
			}
		}
		sort.Strings(why)
		fmt.Fprintf(out, "traces kept by the sampling policy: %d of %d (%s); metrics counted all %d\n",
			kept, rep.Summary.Requests, strings.Join(why, ", "), rep.Summary.Requests)
	}
}

func printWaterfalls(out io.Writer, rep *Report) {
	if len(rep.Waterfalls) == 0 {
		fmt.Fprintf(out, "\n(no traces were sampled, so there are no waterfalls)\n")
		return
	}
	fmt.Fprintf(out, "\n── waterfalls, drawn from the exported spans ──  %s\n", waterfall.Legend)
	for _, w := range rep.Waterfalls {
		fmt.Fprintln(out)
		w.Text(out, 56)
	}
}

func writeHTML(path string, rep *Report, cfg sim.Config) error {
	var tab strings.Builder
	rep.Summary.WriteTable(&tab)
	res := rep.Result
	page := &waterfall.Page{
		Title: "llmtrace simengine: " + rep.Workload.Name,
		Subtitle: fmt.Sprintf("%d requests on a simulated %s, %s simulated; KV cache %d × %d-token blocks, %d-token step budget. Bars are the spans llmtrace exported.",
			len(res.Requests), cfg.Model, clock(res.End.Sub(res.Start)), cfg.NumBlocks, cfg.BlockSize, cfg.MaxNumBatchedTokens),
		Summary:    tab.String(),
		Waterfalls: rep.Waterfalls,
		TTFT:       rep.Summary.TTFT,
		ITL:        rep.Summary.ITL,
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := waterfall.WriteHTML(f, page); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
