// Command multiprocess runs an LLM server's frontend and engine core as two
// OS processes, as vLLM does, and traces every request across both.
//
//	go run ./examples/multiprocess            # the frontend spawns the engine
//
// The frontend (API server) generates requests, tokenizes, sends them to the
// engine over a Unix socket and detokenizes the tokens that come back; it
// records ARRIVED, INPUT_PROCESSED, DETOKENIZED and FINISHED. The engine core
// queues, schedules with chunked prefill and a KV-cache budget, preempts
// under pressure and decodes; it records QUEUED, PREFILLING, DECODING,
// PREEMPTED and FINISHED and streams them to the collector through a
// transport.Producer (binary frames, monotonic timestamps, one clock anchor
// per connection).
//
// By default the collector lives in the frontend process (-host-collector):
// the frontend records its own updates straight into its Tracker and serves
// the engine's stream on -collector. With -host-collector=false the frontend
// streams its updates too, to an external `llmtrace collect -listen
// unix:PATH`, so three processes meet.
//
// -clock-offset shifts the engine process's idea of wall time, to show what
// skew between two processes does: without -align-clocks the engine's spans
// are clamped into their roots (and counted in clamped_spans); with it the
// collector maps the engine's monotonic clock onto its own at the HELLO.
//
// Finished requests are printed as RequestStats JSON lines (-stats-out),
// spans optionally as JSON lines (-spans-out), and exported over OTLP when
// the standard OTEL_* variables are set.
//
// Ctrl-C or SIGTERM ends a run early as its end would: the frontend aborts
// its open requests, flushes what was recorded, prints the summary and
// exits with status 130; an engine hangs up, aborting what it holds.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

type options struct {
	role          string
	engineAddr    string
	collectorAddr string
	hostCollector bool
	spawnEngine   bool
	alignClocks   bool

	// Frontend.
	n          int
	interval   time.Duration
	abortEvery int
	seed       uint64
	statsOut   string
	spansOut   string
	model      string

	// Engine.
	clockOffset time.Duration
	step        time.Duration
	batch       int
	kvTokens    int
	chunk       int
}

func main() {
	var o options
	flag.StringVar(&o.role, "role", "frontend", "frontend or engine")
	flag.StringVar(&o.engineAddr, "engine", "", "the engine's work socket, unix:PATH (default: in a temporary directory)")
	flag.StringVar(&o.collectorAddr, "collector", "", "the collector's socket, unix:PATH (default: in a temporary directory)")
	flag.BoolVar(&o.hostCollector, "host-collector", true, "frontend: run the collector in this process, listening on -collector")
	flag.BoolVar(&o.spawnEngine, "spawn-engine", true, "frontend: start the engine as a child process")
	flag.BoolVar(&o.alignClocks, "align-clocks", false, "hosted collector: map each producer onto this process's clock at its HELLO")
	flag.IntVar(&o.n, "n", 24, "frontend: requests to send")
	flag.DurationVar(&o.interval, "interval", 4*time.Millisecond, "frontend: mean time between arrivals")
	flag.IntVar(&o.abortEvery, "abort-every", 8, "frontend: every Nth request's client disconnects after 3 tokens (0: none)")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.StringVar(&o.statsOut, "stats-out", "-", "hosted collector: RequestStats JSON lines to FILE (- for stdout)")
	flag.StringVar(&o.spansOut, "spans-out", "", "hosted collector: spans as JSON lines to FILE")
	flag.StringVar(&o.model, "model", "toy-llm", "model name")
	flag.DurationVar(&o.clockOffset, "clock-offset", 0, "engine: shift this process's wall clock (to demonstrate skew)")
	flag.DurationVar(&o.step, "step", 2*time.Millisecond, "engine: duration of one scheduler step")
	flag.IntVar(&o.batch, "batch", 8, "engine: most requests running at once")
	flag.IntVar(&o.kvTokens, "kv-tokens", 2400, "engine: KV-cache capacity in tokens; beyond it the newest request is preempted")
	flag.IntVar(&o.chunk, "chunk", 128, "engine: prefill tokens per request per step (chunked prefill)")
	flag.Parse()

	var err error
	switch o.role {
	case "frontend":
		err = runFrontend(&o)
	case "engine":
		err = runEngine(&o)
	default:
		err = fmt.Errorf("unknown -role %q (frontend or engine)", o.role)
	}
	if errors.Is(err, errInterrupted) {
		// Stopped by Ctrl-C or SIGTERM after flushing what was recorded:
		// the shell's convention for a signal's exit.
		fmt.Fprintf(os.Stderr, "multiprocess %s: %v\n", o.role, err)
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "multiprocess %s: %v\n", o.role, err)
		os.Exit(1)
	}
}
