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
// gen_ai.server.request.duration (with error.type on failures and aborts,
// TensorRT-LLM's cancelled and timeout among them),
// llm.server.{queue,prefill,decode,inference}.duration, llm.server.requests
// (by llm.finish_reason), llm.server.preemptions, llm.server.prompt_tokens,
// llm.server.generation_tokens, llm.server.prefix_cache.{queries,hits}
// (on an llmtrace root only with llm.prefix_cache.hit_ratio: cached tokens
// from a response's usage are not prefix-cache hits, as in the tracker)
// and llm.reconstruct.clamped. What one span cannot show is not made up: no
// inter-token latency (a single span has no token times), no scheduler
// gauges, no preemptions for engines.
//
// Metrics are cumulative, keyed by the span's resource (the attributes
// listed in resource_attributes, each value cut at 256 bytes on a rune
// boundary, invalid UTF-8 replaced) and gen_ai.operation.name,
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
// A request span delivered twice (same trace and span id: an OTLP exporter
// retrying after a timeout although the first send arrived, a collector's
// queue re-sending) is counted once: the ids of the last dedup_spans
// request spans counted are remembered (24 to 40 bytes each, fixed when
// the first span arrives; 0 turns it off, at most 10,000,000), and a span
// among them is dropped and counted in the collector's own telemetry,
// otelcol_connector_llmtrace_metrics_duplicate_spans. Size it as request
// spans per second times how late a re-delivery can come (the sender's
// timeout plus its retry backoff); behind load_balancing by trace id a
// re-delivered span reaches the same instance. Spans without ids are
// never taken for duplicates.
//
//	connectors:
//	  llmtrace_metrics:
//	    flush_interval: 15s       # at least 1ms; a bare number is nanoseconds
//	    models: [llama-3-8b]      # empty: the first max_models seen
//	    max_models: 100
//	    adapters: [sql-lora]      # empty: the first max_models seen
//	    max_series: 10000
//	    resource_attributes: [service.name, service.namespace, service.instance.id]
//	    engine: auto
//	    dedup_spans: 100000       # 0: count every delivery
package llmtraceconnector
