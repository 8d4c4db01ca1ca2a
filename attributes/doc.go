// Package attributes holds every attribute key, span name, metric name, unit
// and histogram boundary that llmtrace emits. No other package spells these
// strings, so a rename happens here once and dashboards can rely on them.
//
// The gen_ai.* names follow the OpenTelemetry GenAI semantic conventions as
// published in semantic-conventions v1.37.0 (the last versions whose Go
// semconv packages still carried gen_ai.*; later releases moved them to the
// separate conventions repository without renaming the keys used here). The
// gen_ai.latency.* keys are the ones vLLM, SGLang and TensorRT-LLM share on
// their request spans, so existing dashboards keep working. The llm.* names
// are llmtrace's own, for what the conventions do not cover yet (queueing,
// chunked prefill, preemption, decode segments, the layer's health).
package attributes

// ConventionVersion is the GenAI semantic-conventions version the gen_ai.*
// keys follow.
const ConventionVersion = "1.37.0"
