package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/llmtrace/llmtrace/internal/gunzip"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

func init() {
	commands["replay"] = command{
		summary: "replay an update log (FILE or -) into RequestStats JSON, a summary, and OTLP when OTEL_* is set",
		run: untilSignal(func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
			keepServingOnBrokenPipe() // `replay … | head`: the export and the summary still happen
			return replay(ctx, args, stdin, stdout, stderr)
		}),
	}
}

// maxLine bounds one update-log line; longer lines are rejected.
const maxLine = 1 << 20

// Replay's exit statuses besides 0 and exitUsage.
const (
	exitUnreadable = 1 // the input could not be read
	exitRejected   = 3 // some lines were rejected
)

// replayConfig is what replay's flags ask for.
type replayConfig struct {
	input       string // a file, or "-" for stdin
	grace, hold time.Duration
	quiet       bool
}

func replay(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, code, ok := parseReplay(args, stderr)
	if !ok {
		return code
	}
	return runReplay(ctx, cfg, stdin, stdout, stderr)
}

func parseReplay(args []string, stderr io.Writer) (cfg replayConfig, code int, ok bool) {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.grace, "grace", otelstats.DefaultFrontendGrace, "how long a request one side finished waits for the other side's FINISHED (log time)")
	fs.DurationVar(&cfg.hold, "hold", otelstats.DefaultHoldWindow, "how long an update may precede its request's ARRIVED (log time)")
	fs.BoolVar(&cfg.quiet, "q", false, "no summary table on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace replay [flags] FILE|-\n\nReads the update log (one JSON update per line) and writes one RequestStats\n"+
			"JSON object per finished request to stdout, a summary to stderr. Times are\n"+
			"the log's own: waits and the hold window run on the logged times. A\n"+
			"gzip-compressed log (a rotated foo.log.gz, several members concatenated)\n"+
			"is decompressed as it is read, known by its first bytes, not its name.\n"+
			"Exit status: 0 ok, 1 the input could not be read (or telemetry not set up,\n"+
			"or a gzip stream is truncated or corrupt), 2 usage error, 3 some lines\nwere rejected.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, exitUsage); !ok {
		return cfg, code, false
	}
	switch {
	case fs.NArg() == 0:
		return cfg, usageError(fs, "no input: give the update log's FILE, or - for stdin"), false
	case fs.NArg() > 1:
		return cfg, usageError(fs, "one input at a time (got %d: %q)", fs.NArg(), fs.Args()), false
	case cfg.grace < 0 || cfg.hold < 0:
		return cfg, usageError(fs, "-grace and -hold must be ≥ 0"), false
	}
	cfg.input = fs.Arg(0)
	return cfg, 0, true
}

// replayRun is one replay's outputs and counts.
type replayRun struct {
	stderr   io.Writer
	out      *bufio.Writer
	sum      summary.Collector
	buf      []byte
	rejected int
}

func (r *replayRun) finished(s *otelstats.RequestStats) {
	if s.FinishReason == otelstats.FinishUnfinished {
		return // no FINISHED in the log: not a finished request
	}
	r.sum.Add(s)
	r.buf = append(s.AppendJSON(r.buf[:0]), '\n')
	_, _ = r.out.Write(r.buf)
}

func (r *replayRun) reject(format string, a ...any) {
	r.rejected++
	fmt.Fprintf(r.stderr, format+"\n", a...)
}

// runReplay replays the log until its end or until ctx ends (an
// interrupt): either way what was read is flushed, exported and summed up.
func runReplay(ctx context.Context, cfg replayConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "llmtrace replay: "+format+"\n", a...)
		return code
	}
	in := stdin
	if cfg.input != "-" {
		f, err := os.Open(cfg.input)
		if err != nil {
			return fail(exitUnreadable, "%v", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return fail(exitUnreadable, "%s is a directory, not an update log", cfg.input)
		}
		in = f
	}
	prov, err := otelconf.Setup(context.Background(), otelconf.Config{ServiceName: "llmtrace-replay", Aggregator: otelstats.NewAggregator()})
	if err != nil {
		return fail(1, "telemetry setup: %v", err)
	}
	r := &replayRun{stderr: stderr, out: bufio.NewWriter(stdout)}
	// No WithAutoSweep: the tracker expires on the log's own times.
	tr, err := otelstats.NewTracker(append(prov.TrackerOptions(),
		otelstats.WithTokenLatencies(true),
		otelstats.WithFrontendGrace(cfg.grace),
		otelstats.WithHoldWindow(cfg.hold),
		otelstats.WithRequestTTL(0), // a log's gaps are not abandonment
		otelstats.WithOnFinish(r.finished),
		otelstats.WithOnReject(func(e *otelstats.RejectError) { r.reject("%v", e) }),
	)...)
	if err != nil {
		return fail(1, "%v", err)
	}
	readErr := r.read(tr, gunzip.Maybe(untilDone(ctx, in)))
	if errors.Is(readErr, context.Canceled) {
		fmt.Fprintln(stderr, "llmtrace replay: interrupted: the log is read no further")
		readErr = nil
	}
	// The log's end ends every wait for a side's FINISHED.
	tr.Flush()
	unfinished := tr.InFlight()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tr.Shutdown(sctx)
	// A stdout that fails (a full disk) loses the stats lines, not the
	// export and the summary: the providers are shut down all the same.
	writeErr := r.out.Flush()
	if writeErr != nil {
		fmt.Fprintf(stderr, "llmtrace replay: %v\n", writeErr)
	}
	if err := prov.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "llmtrace replay: export: %v\n", err)
	}
	if sum := prov.Summary(); sum != "" {
		fmt.Fprintf(stderr, "llmtrace replay: %s\n", sum)
	}
	if !cfg.quiet {
		r.sum.WriteTable(stderr)
		if unfinished > 0 {
			fmt.Fprintf(stderr, "%d request(s) had no FINISHED by the end of the log (exported as %q, not printed)\n", unfinished, otelstats.FinishUnfinished)
		}
		if r.rejected > 0 {
			fmt.Fprintf(stderr, "%d update(s) rejected\n", r.rejected)
		}
	}
	switch {
	case readErr != nil:
		return fail(exitUnreadable, "reading input: %v", readErr)
	case writeErr != nil:
		return 1
	case r.rejected > 0:
		return exitRejected
	}
	return 0
}

// read records every line of in; it returns the read error, if any but
// EOF.
func (r *replayRun) read(tr *otelstats.Tracker, in io.Reader) error {
	br := bufio.NewReaderSize(in, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(br, maxLine)
		if err != nil && len(line) == 0 && !tooLong {
			return ignoreEOF(err)
		}
		switch {
		case tooLong:
			// Counted in llm.rejected_updates as too_long, as a collector
			// counts its oversized lines.
			r.reject("line %d: %v", lineNo, tr.Reject(&otelstats.RejectError{
				Reason: otelstats.ReasonTooLong, Detail: fmt.Sprintf("line longer than %d bytes", maxLine)}))
		case len(trimSpace(line)) == 0:
		default:
			if rerr := transport.RecordLine(tr, line); rerr != nil {
				r.reject("line %d: %v", lineNo, rerr)
			}
		}
		if err != nil {
			return ignoreEOF(err)
		}
	}
}

func ignoreEOF(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// readLine reads one line without its newline. A line longer than limit is
// consumed and reported as tooLong.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	var acc []byte
	for {
		frag, isPrefix, e := r.ReadLine()
		if len(acc)+len(frag) > limit {
			tooLong = true
		} else {
			acc = append(acc, frag...)
		}
		if e != nil {
			if tooLong {
				return nil, true, e
			}
			return acc, false, e
		}
		if !isPrefix {
			if tooLong {
				return nil, true, nil
			}
			return acc, false, nil
		}
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// untilDone reads in on another goroutine, so that an interrupt ends a read
// that waits on a pipe (`tail -f log | llmtrace replay -`): once ctx ends,
// Read returns ctx's error. The goroutine leaves with in's next read.
func untilDone(ctx context.Context, in io.Reader) io.Reader {
	ch := make(chan readBlock)
	go func() {
		for {
			b := make([]byte, 64<<10)
			n, err := in.Read(b)
			select {
			case ch <- readBlock{b[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return &chanReader{ctx: ctx, ch: ch}
}

// readBlock is one Read of the input: its bytes and its error.
type readBlock struct {
	b   []byte
	err error
}

// chanReader is the reading end of untilDone.
type chanReader struct {
	ctx  context.Context
	ch   <-chan readBlock
	left []byte
	err  error
}

func (r *chanReader) Read(p []byte) (int, error) {
	for len(r.left) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if err := r.ctx.Err(); err != nil {
			return 0, err // an interrupt wins over input already waiting
		}
		select {
		case blk := <-r.ch:
			r.left, r.err = blk.b, blk.err
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	n := copy(p, r.left)
	r.left = r.left[n:]
	return n, nil
}
