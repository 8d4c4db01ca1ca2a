// Package attributes holds every attribute key, span name, metric name, unit
// and histogram boundary that llmtrace emits. No other package spells these
// strings, so a rename happens here once and dashboards can rely on them.
//
// The gen_ai.* and general keys that the conventions define are taken from
// go.opentelemetry.io/otel/semconv/v1.41.0, the last semconv package of
// otel-go that carries gen_ai.* (later releases moved the GenAI conventions
// to their own repository). Two vendor keys in the gen_ai namespace are kept
// on purpose: gen_ai.request.id and gen_ai.latency.*, which vLLM, SGLang
// and TensorRT-LLM share on their request spans, so existing dashboards and
// queries keep working. The llm.* names are llmtrace's own, for what the
// conventions do not cover yet (queueing, chunked prefill, preemption,
// decode segments, disaggregated serving, the layer's health).
package attributes

// ConventionVersion is the GenAI semantic-conventions version the gen_ai.*
// keys follow.
const ConventionVersion = "1.41.0"
