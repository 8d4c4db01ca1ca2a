// Package overhead is the study of what tracing costs a serving stack at
// saturation (issue 17, BENCHMARKS.md "What tracing costs a serving
// stack"): examples/httpserver — the toy engine recording its engine side
// through the library, behind the openaihttp middleware — with `llmtrace
// proxy` in front of it, both built and run as processes, driven by a
// closed-loop load of streamed chat completions until the machine's CPU is
// the limit.
//
// Each configuration is one way to run the two processes:
//
//	baseline    no llmtrace: the toy engine untraced behind httputil.ReverseProxy
//	off         OTEL_SDK_DISABLED=true
//	metrics     metrics exported, OTEL_TRACES_EXPORTER=none
//	head 1–100% OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=0.01, 0.1, 1
//	tail 1–100% LLMTRACE_SAMPLING=ratio=0.01, 0.1, 1 (the tracker's end-of-request sampling)
//
// Traces and metrics go over OTLP/gRPC (the library's default protocol) to
// a receiver in the test process, which counts what each process sent.
// Per configuration the study measures, at the client, requests and tokens
// per second, TTFT and inter-token latency (p50, p99), and, in each
// process (its -debug-listen /debug/vars), CPU time, allocations and bytes
// allocated per request and peak RSS. Configurations alternate in rounds
// and each figure is the median of the rounds.
//
// The one command (about 15 minutes on two cores: five rounds):
//
//	cd e2e && LLMTRACE_OVERHEAD=full go test -count=1 -timeout=60m -run='^TestOverhead$' -v ./overhead
//
// which writes overhead.md (the table), overhead.json and overhead.svg
// (the plot) to the repository's docs/, where BENCHMARKS.md shows them
// (LLMTRACE_OVERHEAD_OUT: another directory). Without
// LLMTRACE_OVERHEAD=full the test runs every configuration once, briefly,
// and checks the stack and the figures are sound (what CI runs).
package overhead
