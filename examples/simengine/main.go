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
// -html writes a page with the waterfalls, latency histograms and the
// engine's load over time.
//
// The serving features of SPEC §7–9 have their own flags: -pd (a router, a
// prefill and a decode instance, one trace per request across the three;
// -pd-link-gbps, -pd-failure-rate), -spec-decode (-spec-k, -spec-accept),
// -lora (an adapter mix; -max-loras) and -multimodal (a fraction of
// requests with images; -max-images).
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
	"errors"
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
	flag.BoolVar(&o.PD, "pd", false, "disaggregated prefill/decode: a router, a prefill instance and a decode instance, each traced by its own tracker into one trace per request")
	flag.Float64Var(&e.PD.LinkGbps, "pd-link-gbps", e.PD.LinkGbps, "with -pd, the bandwidth of the link the KV cache moves over, in Gb/s")
	flag.Float64Var(&e.PD.FailureRate, "pd-failure-rate", e.PD.FailureRate, "with -pd, the fraction of KV transfers (0 to 1) that fail; the decode instance recomputes the prompt")
	flag.BoolVar(&o.SpecDecode, "spec-decode", false, "speculative decoding: a draft proposes tokens each step, the target accepts a prefix")
	flag.IntVar(&o.SpecK, "spec-k", o.SpecK, "with -spec-decode, draft tokens per step (1 to 16)")
	flag.StringVar(&o.SpecAccept, "spec-accept", o.SpecAccept, "with -spec-decode, the acceptance probability of each draft position given the ones before it were accepted (the last holds for later positions)")
	flag.StringVar(&o.Adapters, "lora", "", "LoRA adapter mix, e.g. sql-lora=0.3,chat-lora=0.2 (the rest use the base model)")
	flag.IntVar(&e.MaxLoRAs, "max-loras", e.MaxLoRAs, "distinct LoRA adapters one batch may hold (vLLM's max_loras)")
	flag.Float64Var(&o.Multimodal, "multimodal", 0, "fraction of requests (0 to 1) that carry images, encoded by a vision encoder before or during prefill")
	flag.IntVar(&o.MaxImages, "max-images", o.MaxImages, "with -multimodal, the most images a request carries")
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
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends the process at once
	if _, err := demo.Run(ctx, o); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Interrupted (Ctrl-C, SIGTERM): what was recorded is
			// flushed; the shell's convention for a signal's exit.
			fmt.Fprintln(os.Stderr, "simengine: interrupted")
			os.Exit(130)
		}
		fmt.Fprintf(os.Stderr, "simengine: %v\n", err)
		os.Exit(1)
	}
}
