// Package demo is examples/simengine's program: it loads a workload, wires
// the simulated engine to an otelstats.Tracker through the providers
// otelconf builds from the OTEL_* environment, and prints the
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
	// Not with PD.
	Sampling string

	// PD serves through a router, a prefill and a decode instance
	// (sim.RunPD; Engine.PD sets the link and the failure rate), each with
	// its own tracker on the one TracerProvider.
	PD bool
	// SpecDecode turns on speculative decoding: SpecK draft tokens a step,
	// accepted by the model SpecAccept (workload.ParseAcceptance).
	SpecDecode bool
	SpecK      int
	SpecAccept string
	// Adapters is the LoRA adapter mix (workload.ParseAdapterMix), e.g.
	// "sql-lora=0.3,chat-lora=0.2"; Engine.MaxLoRAs bounds a batch.
	Adapters string
	// Multimodal is the fraction of requests that carry images, 1 to
	// MaxImages each.
	Multimodal float64
	MaxImages  int
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
		SpecK:         4,
		SpecAccept:    "0.8,0.7,0.6,0.5",
		MaxImages:     2,
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
	// Serving is the summary of the serving features the run used (P/D,
	// speculative decoding, adapters, images); empty without them.
	Serving string
}

// Run runs the demo.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	o.defaults()
	wallStart := time.Now()
	w, err := loadWorkload(o)
	if err != nil {
		return nil, err
	}
	cfg := o.Engine
	cfg.Seed, cfg.Realtime, cfg.Speedup = o.Seed, o.Realtime, o.Speedup
	mix, err := applyFeatures(&o, w, &cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	policy, err := otelstats.ParseSamplingPolicy(o.Sampling)
	if err != nil {
		return nil, err
	}
	// In P/D an instance's spans wait in the capture until the router
	// finishes the request, so it holds every request in flight.
	capture := waterfall.NewCapture(64)
	if o.PD {
		capture = waterfall.NewCapture(1 << 14)
	}
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
		if sum := prov.Summary(); sum != "" {
			fmt.Fprintf(o.Stderr, "simengine: %s\n", sum)
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

	col := newCollection(newPicker(capture, o.Seed), o.OnFinish)
	trs, err := newTrackers(&o, prov, &cfg, policy, col, rep, w.Requests[0].Arrival, mix)
	if err != nil {
		return nil, err
	}
	printHeader(o, w, cfg, rep)
	if o.Progress {
		cfg.Progress = progressPrinter(o.Stderr, w, wallStart)
	}
	var res *sim.Result
	if o.PD {
		res, err = sim.RunPD(ctx, cfg, w.Requests, sim.PDTrackers{Router: trs[0], Prefill: trs[1], Decode: trs[2]})
	} else {
		res, err = sim.Run(ctx, cfg, w.Requests, trs[0])
	}
	for _, tr := range trs {
		if serr := tr.Shutdown(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = serr
		}
	}
	if err != nil {
		return nil, err
	}
	if res.Rejections > 0 {
		fmt.Fprintf(o.Stderr, "warning: llmtrace rejected %d updates of the simulator; first: %v\n", res.Rejections, res.FirstRejection)
	}
	rep.Result = res
	rep.Wall = time.Since(wallStart)
	col.mu.Lock()
	rep.Summary, rep.Kept = &col.client, col.kept
	rep.Waterfalls = col.pick.waterfalls(&col.client)
	var serving strings.Builder
	col.serving.write(&serving, &o, &cfg, res, mix)
	rep.Serving = serving.String()
	col.mu.Unlock()

	return rep, report(ctx, &o, rep, cfg, prov)
}

// report prints the summary and waterfalls, writes the page, flushes the
// traces and keeps /metrics served as long as asked.
func report(ctx context.Context, o *Options, rep *Report, cfg sim.Config, prov *otelconf.Providers) error {
	printSummary(o.Stdout, rep, cfg)
	printWaterfalls(o.Stdout, rep)
	if o.HTML != "" {
		if err := writeHTML(o.HTML, rep, cfg); err != nil {
			return err
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
	return nil
}

func (o *Options) defaults() {
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
}

// newTrackers builds the engine's tracker, or in P/D the router's, the
// prefill instance's and the decode instance's, all on the providers' one
// TracerProvider. The instances trust the router's trace context to decide
// sampling, so each client request is kept or dropped whole.
func newTrackers(o *Options, prov *otelconf.Providers, cfg *sim.Config, policy *otelstats.SamplingPolicy,
	col *collection, rep *Report, t0 time.Time, mix []workload.Share) ([]*otelstats.Tracker, error) {
	adapters := make([]string, 0, len(mix))
	for _, m := range mix {
		adapters = append(adapters, m.Adapter)
	}
	mk := func(name string, onFinish func(*otelstats.RequestStats), extra ...otelstats.Option) (*otelstats.Tracker, error) {
		var tr *otelstats.Tracker
		opts := append(prov.TrackerOptions(),
			otelstats.WithSampling(policy),
			otelstats.WithModels(cfg.Model),
			otelstats.WithAdapters(adapters...),
			otelstats.WithTokenLatencies(true),
			// The simulator finishes every request it admits; a request
			// queued for longer than the TTL under an extreme -rate-scale
			// is still alive and must not be ended as abandoned.
			otelstats.WithRequestTTL(0),
			otelstats.WithOnFinish(onFinish))
		if name != "" {
			logger := slog.New(&statsHandler{w: o.Stdout, t0: t0, name: name, stats: func() otelstats.Stats { return tr.LastStats() }, lines: &rep.StatsLines})
			opts = append(opts, otelstats.WithStatsLog(logger, o.StatsInterval))
		}
		var err error
		tr, err = otelstats.NewTracker(append(opts, extra...)...)
		return tr, err
	}
	if !o.PD {
		tr, err := mk("-", col.unified)
		return []*otelstats.Tracker{tr}, err
	}
	router, err := mk("", col.router)
	if err != nil {
		return nil, err
	}
	p, err := mk(cfg.PD.Prefill, col.instance, otelstats.WithTrustParentSampling(true), otelstats.WithPDRole(otelstats.PDRolePrefill))
	if err != nil {
		return nil, err
	}
	d, err := mk(cfg.PD.Decode, col.instance, otelstats.WithTrustParentSampling(true), otelstats.WithPDRole(otelstats.PDRoleDecode))
	if err != nil {
		return nil, err
	}
	return []*otelstats.Tracker{router, p, d}, nil
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
	name  string // the instance, in P/D; "-" for the one engine
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
	who := ""
	if h.name != "-" {
		who = " " + h.name
	}
	_, err := fmt.Fprintf(h.w, "INFO %s [sim +%s%s] %s\n", at.UTC().Format("01-02 15:04:05"), clock(at.Sub(h.t0)), who, r.Message)
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
	for _, f := range features(o, cfg) {
		fmt.Fprintf(out, "%s\n", f)
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

// features says which serving features the run uses, one line each.
func features(o Options, cfg sim.Config) []string {
	var f []string
	if o.PD {
		f = append(f, fmt.Sprintf("P/D: a router sends each request to %s (max_tokens 1), then to %s, which loads its KV cache over a %g Gb/s link (%v + %d KiB a token); %g%% of transfers fail",
			cfg.PD.Prefill, cfg.PD.Decode, cfg.PD.LinkGbps, cfg.PD.Latency, cfg.PD.BytesPerToken>>10, 100*cfg.PD.FailureRate))
	}
	if cfg.Spec.K > 0 {
		f = append(f, fmt.Sprintf("speculative decoding: %d draft tokens a step, accepted with probability %s by position",
			cfg.Spec.K, o.SpecAccept))
	}
	if o.Adapters != "" {
		f = append(f, fmt.Sprintf("LoRA adapters: %s, at most %d in a batch", o.Adapters, cfg.MaxLoRAs))
	}
	if o.Multimodal > 0 {
		f = append(f, fmt.Sprintf("multimodal: %g%% of requests carry 1–%d images of %d tokens; encoder %v + %v a token",
			100*o.Multimodal, o.MaxImages, cfg.Multimodal.TokensPerImage, cfg.Cost.EncodeRun, cfg.Cost.PerEncoderToken))
	}
	return f
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
	if o := res.Instances; len(o) > 1 {
		for _, in := range o {
			fmt.Fprintf(out, "%s: %d steps, peak batch %d running, peak queue %d waiting, %d preemptions\n",
				in.Name, in.Steps, in.MaxRunning, in.MaxWaiting, in.Preemptions)
		}
	} else {
		fmt.Fprintf(out, "engine: peak batch %d running, peak queue %d waiting\n", res.MaxRunning, res.MaxWaiting)
	}
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
	fmt.Fprint(out, rep.Serving)
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
	what := "one engine"
	if len(res.Instances) > 1 {
		what = "a router, " + cfg.PD.Prefill + " and " + cfg.PD.Decode
	}
	page := &waterfall.Page{
		Title: "llmtrace simengine: " + rep.Workload.Name,
		Subtitle: fmt.Sprintf("%d requests on a simulated %s (%s), %s simulated; KV cache %d × %d-token blocks, %d-token step budget. Bars are the spans llmtrace exported.",
			len(res.Requests), cfg.Model, what, clock(res.End.Sub(res.Start)), cfg.NumBlocks, cfg.BlockSize, cfg.MaxNumBatchedTokens),
		Summary:    tab.String(),
		Serving:    strings.TrimLeft(rep.Serving, "\n"),
		Waterfalls: rep.Waterfalls,
		TTFT:       rep.Summary.TTFT,
		ITL:        rep.Summary.ITL,
	}
	for _, in := range res.Instances {
		page.Load = append(page.Load, loadOf(in))
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

// loadOf is an instance's load series for the page.
func loadOf(in sim.Instance) waterfall.Load {
	l := waterfall.Load{Name: in.Name, Step: in.LoadWidth}
	if in.Role != "" {
		l.Name += " (" + in.Role + ")"
	}
	for i, p := range in.Load {
		if i == 0 {
			l.Start = p.At
		}
		l.Running = append(l.Running, p.Running)
		l.Waiting = append(l.Waiting, p.Waiting)
		l.KVCacheUsage = append(l.KVCacheUsage, p.KVCacheUsage)
		l.Preemptions = append(l.Preemptions, p.Preemptions)
	}
	return l
}
