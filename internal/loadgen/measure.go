package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

// ErrNoTraceExport is Measure's error when neither the environment nor
// Options.Endpoint exports traces: there is nothing to measure.
var ErrNoTraceExport = errors.New("loadgen: no traces endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or pass -endpoint host:port")

// shutdownTimeout bounds the tracker's and the providers' shutdown at the
// end of Measure; the batch processor's own deadline (5 s) usually ends it
// sooner.
const shutdownTimeout = 30 * time.Second

// Options is one `llmtrace load` run: the command's flags. Level needs a
// positive Duration, and Stdout and Stderr must be set.
type Options struct {
	// Level is the load level; with FindMax, where the search starts.
	Level Config
	// FindMax searches for the highest sustained rate (Runner.FindMax),
	// running at most MaxLevels levels.
	FindMax   bool
	MaxLevels int
	// Progress is the interval of the progress line on Stderr; 0: none.
	Progress time.Duration
	// Endpoint, when set, exports traces over OTLP there
	// (otelconf.Config.TracesEndpoint), whatever the environment says.
	Endpoint string
	// Metrics also exports metrics as the environment says; without it
	// only spans are exported.
	Metrics bool
	// Stdout gets one line per level, a max line with FindMax, and a total
	// line; Stderr the export target, progress and the export status.
	Stdout, Stderr io.Writer
}

// Measure sets the providers up from the environment (otelconf), drives a
// tracker through o's levels and prints what each measured. When ctx ends
// it stops the level, skips what is left of the flush and shuts down
// within the batch processor's deadline; the total line is printed on
// every path, and there produced = exported + dropped exactly.
func Measure(ctx context.Context, o Options) error {
	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "llmtrace-load", TracesEndpoint: o.Endpoint, NoMetricsExport: !o.Metrics})
	if err != nil {
		return fmt.Errorf("telemetry setup: %w", err)
	}
	if prov.Batch == nil {
		return errors.Join(ErrNoTraceExport, prov.Shutdown(context.Background()))
	}
	tr, err := otelstats.NewTracker(prov.TrackerOptions()...)
	if err != nil {
		return errors.Join(err, prov.Shutdown(context.Background()))
	}
	r := New(tr, prov.Batch)
	fmt.Fprintf(o.Stderr, "llmtrace load: exporting spans to %s; %s\n", prov.Status().Traces.Target, prov.BatchConfig)

	stop := r.startProgress(o.Stderr, o.Progress)
	runErr := r.levels(ctx, o)
	stop()

	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("tracker shutdown: %w", err))
	}
	if err := prov.Shutdown(sctx); err != nil {
		fmt.Fprintf(o.Stderr, "llmtrace load: export shutdown: %v\n", err)
	}
	st := prov.Status()
	fmt.Fprintf(o.Stdout, "llmtrace-load total produced=%d exported=%d dropped=%d\n", st.Traces.Produced, st.Traces.Exported, st.Traces.Dropped)
	fmt.Fprintf(o.Stderr, "llmtrace load: %s\n", st)
	return runErr
}

// levels runs one level, or the FindMax search, printing a line per level.
func (r *Runner) levels(ctx context.Context, o Options) error {
	line := func(res Result) { fmt.Fprintln(o.Stdout, "llmtrace-load "+strings.Join(res.Fields(), " ")) }
	if !o.FindMax {
		res, err := r.Run(ctx, o.Level)
		line(res)
		return err
	}
	best, _, err := r.FindMax(ctx, o.Level, o.MaxLevels, line)
	if best.Config.Rate > 0 {
		fmt.Fprintf(o.Stdout, "llmtrace-load max_rate=%.0f offered_rps=%.1f completed_rps=%.1f spans_per_s=%.1f step_p99_us=%d step_max_us=%d\n",
			best.Config.Rate, best.OfferedRate(), best.CompletedRate(), best.SpanRate(), best.StepP99.Microseconds(), best.StepMax.Microseconds())
	} else {
		fmt.Fprintln(o.Stdout, "llmtrace-load max_rate=0")
	}
	return err
}

// startProgress prints a progress line on w every interval until the
// returned function is called (which waits for the printer to stop).
func (r *Runner) startProgress(w io.Writer, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var last progressSample
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			last = r.printProgress(w, every, last)
		}
	}()
	return func() { close(done); <-exited }
}

type progressSample struct{ produced, exported, dropped, offered, completed int64 }

func (r *Runner) printProgress(w io.Writer, every time.Duration, last progressSample) progressSample {
	var now progressSample
	now.produced, now.exported, now.dropped = r.bp.Counts()
	now.offered, now.completed, _ = r.Progress()
	if now.offered < last.offered { // a new level
		last.offered, last.completed = 0, 0
	}
	s := every.Seconds()
	rate := func(a, b int64) float64 { return float64(a-b) / s }
	fmt.Fprintf(w, "  offered %.0f/s completed %.0f/s | spans produced %.0f/s exported %.0f/s dropped %.0f/s | queued %d\n",
		rate(now.offered, last.offered), rate(now.completed, last.completed), rate(now.produced, last.produced),
		rate(now.exported, last.exported), rate(now.dropped, last.dropped), now.produced-now.exported-now.dropped)
	return now
}
