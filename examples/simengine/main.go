// Command simengine is llmtrace's demo: a simulated LLM engine that
// schedules like vLLM V1 (continuous batching, chunked prefill, a paged KV
// cache with prefix caching, recompute preemption) serves a real production
// trace — the Azure LLM inference trace 2023, conversation service — on a
// virtual clock, instrumented only through llmtrace's public API.
//
//	go run ./examples/simengine
//
// prints vLLM-style stats lines as simulated time passes, then the
// percentile summary and three request waterfalls drawn from the spans
// llmtrace exported. With OTEL_EXPORTER_OTLP_ENDPOINT set, traces and
// metrics go over OTLP as well; -metrics-addr serves Prometheus /metrics;
// -html writes a page with the waterfalls and latency histograms.
//
// The trace is read from ../shared/workloads/azure-llm-2023-conv.csv next
// to the repository when present (-workload picks another CSV with columns
// TIMESTAMP,ContextTokens,GeneratedTokens); otherwise a synthetic Poisson
// workload is used. The trace is CC-BY 4.0: Patel et al., "Splitwise:
// Efficient generative LLM inference using phase splitting", ISCA 2024, and
// the Azure/AzurePublicDataset repository.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmtrace/llmtrace/examples/simengine/demo"
)

func main() {
	o := demo.DefaultOptions()
	e := &o.Engine
	flag.StringVar(&o.Workload, "workload", "", "request trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens); default ../shared/workloads/azure-llm-2023-conv.csv when present, else \"synthetic\"")
	flag.IntVar(&o.Requests, "requests", o.Requests, "replay the first N requests (0: all)")
	flag.Float64Var(&o.RateScale, "rate-scale", o.RateScale, "multiply the arrival rate (2 = twice as many requests per second)")
	flag.Float64Var(&o.SyntheticRate, "synthetic-rate", o.SyntheticRate, "arrival rate of the synthetic workload, requests/s")
	flag.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the synthetic workload and the choice of system prompts")
	flag.BoolVar(&o.Realtime, "realtime", false, "pace the replay against the wall clock instead of a virtual clock")
	flag.Float64Var(&o.Speedup, "speedup", o.Speedup, "with -realtime, replay this many times faster than real time")
	flag.StringVar(&o.Epoch, "epoch", o.Epoch, "when the replay happens: auto (now for -realtime, ending now when exporting traces, else the trace's own times), trace, or an RFC 3339 time")
	flag.StringVar(&o.HTML, "html", "", "write an HTML report (waterfalls, TTFT/ITL histograms) to this file")
	flag.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address (e.g. :9464)")
	flag.DurationVar(&o.Linger, "linger", 0, "with -metrics-addr, keep serving this long after the run so Prometheus can scrape it")
	flag.DurationVar(&o.StatsInterval, "stats-interval", o.StatsInterval, "period of the stats line, in simulated time")
	flag.IntVar(&e.NumBlocks, "kv-blocks", e.NumBlocks, "KV-cache blocks of 16 tokens (smaller: more preemptions)")
	flag.IntVar(&e.MaxNumBatchedTokens, "max-batched-tokens", e.MaxNumBatchedTokens, "per-step token budget")
	flag.IntVar(&e.MaxNumSeqs, "max-seqs", e.MaxNumSeqs, "cap on running requests")
	flag.IntVar(&e.MaxModelLen, "max-model-len", e.MaxModelLen, "context window in tokens")
	flag.StringVar(&e.Model, "model", e.Model, "model name on spans and metrics")
	flag.Float64Var(&e.AbortRate, "abort-rate", e.AbortRate, "fraction of clients (0 to 1) that disconnect halfway through their response; the requests end with finish reason abort")
	flag.StringVar(&o.Sampling, "sampling", "", "end-of-request sampling policy, e.g. errors,preempted,ttft>1s,p99,ratio=0.05 (default: keep every trace)")
	quiet := flag.Bool("quiet", false, "no progress lines on stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "simengine: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	o.Progress = !*quiet
	o.Stdout, o.Stderr = os.Stdout, os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := demo.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "simengine: %v\n", err)
		os.Exit(1)
	}
}
