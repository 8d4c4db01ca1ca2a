// Package batch is the span processor llmtrace's commands export through: a
// batching sdktrace.SpanProcessor like the SDK's BatchSpanProcessor — a
// bounded queue, a non-blocking OnEnd, one export goroutine, Shutdown once
// and within its deadline — that also accounts for every span exactly.
//
// Why not the SDK's: an operator who turns tracing on asks what it lost.
// sdktrace.BatchSpanProcessor drops silently when its queue is full, and
// neither counts the spans of a failed export nor those still queued or in
// flight when Shutdown's deadline passes. This Processor counts each of them
// in llm.spans.dropped, so that at any time after Shutdown returned
//
//	produced = exported + dropped
//
// exactly (Counts). An export that the deadline cuts short is cancelled
// through its context and its spans count as dropped: spans are exported
// only when the exporter said so in time. BenchmarkProcessor compares its
// cost with the SDK's (BENCHMARKS.md).
//
// The option names are the SDK's (WithMaxQueueSize, WithMaxExportBatchSize,
// WithBatchTimeout, WithExportTimeout); the defaults differ where a
// measurement against a real Jaeger said so (see the options). Nothing here
// reads the environment: otelconf maps OTEL_BSP_* onto these options.
package batch
