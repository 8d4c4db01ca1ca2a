package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

func init() {
	commands["replay"] = command{
		summary: "replay an update log (FILE or -) into RequestStats JSON, a summary, and OTLP when OTEL_* is set",
		run:     replay,
	}
}

// maxLine bounds one update-log line; longer lines are rejected.
const maxLine = 1 << 20

// Replay's exit statuses besides 0 and exitUsage.
const (
	exitUnreadable = 1 // the input could not be read
	exitRejected   = 3 // some lines were rejected
)

func replay(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grace := fs.Duration("grace", otelstats.DefaultFrontendGrace, "how long a request one side finished waits for the other side's FINISHED (log time)")
	hold := fs.Duration("hold", otelstats.DefaultHoldWindow, "how long an update may precede its request's ARRIVED (log time)")
	quiet := fs.Bool("q", false, "no summary table on stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: llmtrace replay [flags] FILE|-\n\nReads the update log (one JSON update per line) and writes one RequestStats\n"+
			"JSON object per finished request to stdout, a summary to stderr. Times are\n"+
			"the log's own: waits and the hold window run on the logged times.\n"+
			"Exit status: 0 ok, 1 the input could not be read (or telemetry not set up),\n2 usage error, 3 some lines were rejected.\n\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, exitUsage); !ok {
		return code
	}
	switch {
	case fs.NArg() == 0:
		return usageError(fs, "no input: give the update log's FILE, or - for stdin")
	case fs.NArg() > 1:
		return usageError(fs, "one input at a time (got %d: %q)", fs.NArg(), fs.Args())
	}
	in := stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "llmtrace replay: %v\n", err)
			return exitUnreadable
		}
		defer f.Close()
		in = f
	}

	ctx := context.Background()
	agg := otelstats.NewAggregator()
	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "llmtrace-replay", Aggregator: agg})
	if err != nil {
		fmt.Fprintf(stderr, "llmtrace replay: telemetry setup: %v\n", err)
		return 1
	}
	out := bufio.NewWriter(stdout)
	var sum summary.Collector
	rejected := 0
	var buf []byte
	tr, err := otelstats.NewTracker(append(prov.TrackerOptions(),
		otelstats.WithTokenLatencies(true),
		otelstats.WithFrontendGrace(*grace),
		otelstats.WithHoldWindow(*hold),
		otelstats.WithRequestTTL(0), // a log's gaps are not abandonment
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			if s.FinishReason == otelstats.FinishUnfinished {
				return // no FINISHED in the log: not a finished request
			}
			sum.Add(s)
			buf = s.AppendJSON(buf[:0])
			buf = append(buf, '\n')
			_, _ = out.Write(buf)
		}),
		otelstats.WithOnReject(func(e *otelstats.RejectError) {
			rejected++
			fmt.Fprintf(stderr, "%v\n", e)
		}),
	)...)
	if err != nil {
		fmt.Fprintf(stderr, "llmtrace replay: %v\n", err)
		return 1
	}

	r := bufio.NewReaderSize(in, 64<<10)
	lineNo := 0
	readErr := error(nil)
	for {
		line, tooLong, err := readLine(r, maxLine)
		if err != nil && len(line) == 0 && !tooLong {
			if err != io.EOF {
				readErr = err
			}
			break
		}
		lineNo++
		switch {
		case tooLong:
			rejected++
			fmt.Fprintf(stderr, "line %d: rejected: line longer than %d bytes\n", lineNo, maxLine)
		case len(trimSpace(line)) == 0:
		default:
			if rerr := transport.RecordLine(tr, line); rerr != nil {
				rejected++
				fmt.Fprintf(stderr, "line %d: %v\n", lineNo, rerr)
			}
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	// The log's end ends every wait for a side's FINISHED.
	tr.Flush()
	unfinished := tr.InFlight()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = tr.Shutdown(sctx)
	if err := out.Flush(); err != nil {
		fmt.Fprintf(stderr, "llmtrace replay: %v\n", err)
		return 1
	}
	if err := prov.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "llmtrace replay: export: %v\n", err)
	}
	if !*quiet {
		sum.WriteTable(stderr)
		if unfinished > 0 {
			fmt.Fprintf(stderr, "%d request(s) had no FINISHED by the end of the log (exported as %q, not printed)\n", unfinished, otelstats.FinishUnfinished)
		}
		if rejected > 0 {
			fmt.Fprintf(stderr, "%d update(s) rejected\n", rejected)
		}
	}
	if readErr != nil {
		fmt.Fprintf(stderr, "llmtrace replay: reading input: %v\n", readErr)
		return exitUnreadable
	}
	if rejected > 0 {
		return exitRejected
	}
	return 0
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
