// Package llmtraceconnector is an OpenTelemetry Collector traces-to-metrics
// connector (type "llmtrace_metrics") that derives the metrics of SPEC §4
// from request spans, for every request that reaches it: put it before any
// sampling and every request counts, kept or not.
//
// It reads llmtrace's own root spans and engines' single request spans
// (vLLM's llm_request, SGLang's, TensorRT-LLM's) alike: the instants of
// package reconstruct, and from them the durations of SPEC §2, so a
// metric and the waterfall of the same request agree. Instruments, units
// and bucket boundaries are the library's (package attributes):
// gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token,
// gen_ai.server.request.duration (with error.type on failures and aborts),
// llm.server.{queue,prefill,decode,inference}.duration, llm.server.requests
// (by llm.finish_reason), llm.server.preemptions, llm.server.prompt_tokens,
// llm.server.generation_tokens, llm.server.prefix_cache.{queries,hits} and
// llm.reconstruct.clamped. What one span cannot show is not made up: no
// inter-token latency (a single span has no token times), no scheduler
// gauges, no preemptions for engines.
//
// Metrics are cumulative, keyed by the span's resource (the attributes
// listed in resource_attributes) and gen_ai.operation.name,
// gen_ai.request.model (collapsed to "other" outside models, or past
// max_models distinct names), llm.lora.adapter (likewise, outside adapters
// or past max_models), llm.pd.role (SPEC §7: prefill and decode instances
// keep apart), error.type and llm.finish_reason; never a request id. As in
// the tracker, a model or adapter name earns its series only with a
// request that did not fail, and the free-form labels are bounded: the
// operation and the finish reason to the usual values and 16 others, the
// provider to the engines' names and 16 others, error.type to 64 values;
// any later value is "other". They are emitted every flush_interval and at shutdown. Past
// max_series a new series is folded into one with otel.metric.overflow=true,
// as the OpenTelemetry SDK does, and a new resource (a new pod) into one
// resource with that attribute, so churning instances cannot grow the
// series past the bound.
//
//	connectors:
//	  llmtrace_metrics:
//	    flush_interval: 15s
//	    models: [llama-3-8b]      # empty: the first max_models seen
//	    max_models: 100
//	    adapters: [sql-lora]      # empty: the first max_models seen
//	    max_series: 10000
//	    resource_attributes: [service.name, service.namespace, service.instance.id]
//	    engine: auto
package llmtraceconnector
