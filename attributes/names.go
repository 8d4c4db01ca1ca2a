package attributes

// Span names (SPEC §3). The root span is named by RootSpanName.
const (
	SpanInputProcessing = "llm.input_processing"
	// SpanHandoff is the request travelling from the frontend to the
	// engine's scheduler: INPUT_PROCESSED → first QUEUED, when that gap is
	// not zero.
	SpanHandoff    = "llm.handoff"
	SpanQueue      = "llm.queue"
	SpanPrefill    = "llm.prefill"
	SpanDecode     = "llm.decode"
	SpanDetokenize = "llm.detokenize"

	// EventPrefillChunk marks each further chunk of a chunked prefill.
	EventPrefillChunk = "llm.prefill.chunk"
	// EventDecodeStep marks each engine step of a decode segment (detail
	// level 2).
	EventDecodeStep = "llm.decode.step"
)

// RootSpanName is the GenAI convention's span name, "{operation} {model}",
// e.g. "chat llama-3-8b". An empty model leaves the operation alone.
func RootSpanName(operation, model string) string {
	if model == "" {
		return operation
	}
	return operation + " " + model
}

// Metric names (SPEC §4).
const (
	MetricTimeToFirstToken   = "gen_ai.server.time_to_first_token"
	MetricTimePerOutputToken = "gen_ai.server.time_per_output_token"
	MetricRequestDuration    = "gen_ai.server.request.duration"
	MetricInterTokenLatency  = "llm.server.inter_token_latency"
	MetricQueueDuration      = "llm.server.queue.duration"
	MetricPrefillDuration    = "llm.server.prefill.duration"
	MetricDecodeDuration     = "llm.server.decode.duration"
	MetricInferenceDuration  = "llm.server.inference.duration"

	MetricRequests         = "llm.server.requests"
	MetricPreemptions      = "llm.server.preemptions"
	MetricPromptTokens     = "llm.server.prompt_tokens"
	MetricGenerationTokens = "llm.server.generation_tokens"
	MetricPrefixCacheQuery = "llm.server.prefix_cache.queries"
	MetricPrefixCacheHits  = "llm.server.prefix_cache.hits"
	MetricRequestsRunning  = "llm.server.requests.running"
	MetricRequestsWaiting  = "llm.server.requests.waiting"
	MetricKVCacheUsage     = "llm.server.kv_cache.usage"
	MetricRejectedUpdates  = "llm.rejected_updates"
	MetricSpansDropped     = "llm.spans.dropped"
	MetricSpansClamped     = "llm.spans.clamped"
	MetricRequestsEvicted  = "llm.server.requests.evicted"
	// MetricAttributesTruncated counts client-supplied strings cut at
	// their cap, or with invalid UTF-8 replaced by U+FFFD, before they
	// became attributes, by llm.truncated.key.
	MetricAttributesTruncated = "llm.attributes.truncated"
)

// Units, in UCUM as the conventions use them.
const (
	UnitSeconds = "s"
	UnitToken   = "{token}"
	UnitRequest = "{request}"
	UnitUpdate  = "{update}"
	UnitSpan    = "{span}"
	UnitRatio   = "1"
	UnitPreempt = "{preemption}"
)
