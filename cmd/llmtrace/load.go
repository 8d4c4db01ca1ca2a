package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/llmtrace/llmtrace/internal/loadgen"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

func init() {
	commands["load"] = command{
		summary: "drive the tracker as fast as asked with OTLP export; report requests/s, spans/s, drops and step latency",
		run:     untilSignal(load),
	}
}

// bspVars are the standard batch span processor variables load reports.
var bspVars = []string{"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT"}

// load runs one load level (or a -find-max ramp) and prints one summary line
// per level on stdout, progress on stderr.
func load(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "OTLP gRPC receiver as host:port (insecure); sets OTEL_EXPORTER_OTLP_TRACES_ENDPOINT for this process")
	rate := fs.Float64("rate", 1000, "offered requests/s, paced regardless of completions (open loop); 0: flat out, the batch kept full, no model time")
	duration := fs.Duration("duration", 10*time.Second, "how long requests arrive (per level with -find-max)")
	inFlight := fs.Int("in-flight", 256, "batch size: requests running at once")
	promptTokens := fs.Int("prompt-tokens", 128, "prompt tokens per request (one prefill chunk)")
	outputTokens := fs.Int("output-tokens", 16, "output tokens per request (one engine step each)")
	stepTime := fs.Duration("step-time", time.Millisecond, "simulated model time per engine step with -rate > 0")
	maxWaiting := fs.Int("max-waiting", 0, "bound of the engine's waiting queue; arrivals beyond it are shed and counted (0: 16 × -in-flight)")
	findMax := fs.Bool("find-max", false, "search for the highest rate with zero drops: start at -rate, double, then bisect to 10 %")
	levels := fs.Int("levels", 10, "most levels -find-max runs")
	progress := fs.Duration("progress", time.Second, "interval of the progress line on stderr (0: off)")
	metrics := fs.Bool("metrics", false, "also export metrics over OTLP (off by default: Jaeger takes traces only)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace load [-endpoint HOST:PORT] [-rate N] [-duration D] [-find-max] [flags]\n\n"+
			"Drives a tracker as an engine loop would — arrivals, schedule and output steps,\n"+
			"the frontend's detokenized deliveries and finish — with OTLP trace export\n"+
			"(OTEL_EXPORTER_OTLP_* and OTEL_BSP_* apply), and reports offered and completed\n"+
			"requests/s, spans/s produced and exported, spans dropped and the engine loop's\n"+
			"step latency. A level is sustained when nothing was dropped, shed or rejected\n"+
			"and at most one batch waited at its end. One line per level on stdout:\n"+
			"  llmtrace-load key=value ...\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, 2); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "llmtrace load: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case *rate < 0 || *duration <= 0 || *inFlight <= 0 || *promptTokens <= 0 || *outputTokens <= 0 || *stepTime < 0 || *levels <= 0:
		return usageErr("-rate, -step-time must be ≥ 0; -duration, -in-flight, -prompt-tokens, -output-tokens, -levels > 0")
	}
	if *endpoint != "" {
		if _, _, err := net.SplitHostPort(*endpoint); err != nil {
			return usageErr("-endpoint %q: want host:port", *endpoint)
		}
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "llmtrace load: "+format+"\n", a...)
		return 1
	}

	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "llmtrace-load", TracesEndpoint: *endpoint, NoMetricsExport: !*metrics})
	if err != nil {
		return fail("telemetry setup: %v", err)
	}
	if prov.Batch == nil {
		_ = prov.Shutdown(context.Background())
		return usageErr("no traces endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or pass -endpoint host:port")
	}
	tr, err := otelstats.NewTracker(prov.TrackerOptions()...)
	if err != nil {
		_ = prov.Shutdown(context.Background())
		return fail("%v", err)
	}
	r := loadgen.New(tr, prov.Batch)

	var bsp []string
	for _, v := range bspVars {
		val := os.Getenv(v)
		if val == "" {
			val = "default"
		}
		bsp = append(bsp, v+"="+val)
	}
	fmt.Fprintf(stderr, "llmtrace load: exporting spans to %s; %s\n", prov.Status().Traces.Target, strings.Join(bsp, " "))

	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if *progress <= 0 {
			<-stopProgress
			return
		}
		tick := time.NewTicker(*progress)
		defer tick.Stop()
		var lastP, lastE, lastD, lastO, lastC int64
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
			}
			p, e, d := prov.Batch.Counts()
			o, c, _ := r.Progress()
			if o < lastO { // a new level
				lastO, lastC = 0, 0
			}
			s := progress.Seconds()
			fmt.Fprintf(stderr, "  offered %.0f/s completed %.0f/s | spans produced %.0f/s exported %.0f/s dropped %.0f/s | queued %d\n",
				float64(o-lastO)/s, float64(c-lastC)/s, float64(p-lastP)/s, float64(e-lastE)/s, float64(d-lastD)/s, p-e-d)
			lastP, lastE, lastD, lastO, lastC = p, e, d, o, c
		}
	}()

	cfg := loadgen.Config{
		Rate: *rate, Duration: *duration, InFlight: *inFlight, PromptTokens: *promptTokens,
		OutputTokens: *outputTokens, StepTime: *stepTime, MaxWaiting: *maxWaiting,
	}
	line := func(res loadgen.Result) {
		fmt.Fprintln(stdout, "llmtrace-load "+strings.Join(res.Fields(), " "))
	}
	status := 0
	if *findMax {
		best, _, err := r.FindMax(ctx, cfg, *levels, line)
		if err != nil {
			status = fail("%v", err)
		}
		if best.Config.Rate > 0 {
			fmt.Fprintf(stdout, "llmtrace-load max_rate=%.0f offered_rps=%.1f completed_rps=%.1f spans_per_s=%.1f step_p99_us=%d step_max_us=%d\n",
				best.Config.Rate, best.OfferedRate(), best.CompletedRate(), best.SpanRate(), best.StepP99.Microseconds(), best.StepMax.Microseconds())
		} else {
			fmt.Fprintln(stdout, "llmtrace-load max_rate=0")
		}
	} else {
		res, err := r.Run(ctx, cfg)
		line(res)
		if err != nil {
			status = fail("%v", err)
		}
	}
	close(stopProgress)
	<-progressDone

	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		status = fail("tracker shutdown: %v", err)
	}
	if err := prov.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "llmtrace load: export shutdown: %v\n", err)
	}
	p, e, d := prov.Batch.Counts()
	fmt.Fprintf(stdout, "llmtrace-load total produced=%d exported=%d dropped=%d\n", p, e, d)
	return status
}
