// Package llmtraceprocessor is an OpenTelemetry Collector processor
// (type "llmtrace") that expands the one request span vLLM, SGLang and
// TensorRT-LLM emit into llmtrace's children (SPEC §10): for every span
// with the shared gen_ai.latency.* durations it adds llm.input_processing,
// llm.queue, llm.prefill and llm.decode spans, each marked
// llm.reconstructed=true, parented to the engine's span in its trace, in
// the same resource under the scope github.com/llmtrace/llmtrace/reconstruct.
// The engine span gains llm.reconstruct.engine (and llm.reconstruct.clamped
// when its values contradicted each other). Every other span, llmtrace's
// own roots included, passes untouched; a span already expanded is not
// expanded again, and one without a trace id or a span id (its children
// could not be parented in its trace) is not expanded.
//
// Configuration:
//
//	processors:
//	  llmtrace:
//	    engine: auto   # or vllm, vllm-v0, sglang, tensorrt-llm
//
// A forced engine applies to every engine span; llmtrace's own roots are
// never expanded, whatever the setting. The mapping per engine and version
// is documented in package github.com/llmtrace/llmtrace/reconstruct.
package llmtraceprocessor
