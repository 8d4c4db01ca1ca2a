package attributes

import "go.opentelemetry.io/otel/attribute"

// GenAI convention keys (semantic-conventions v1.37.0).
const (
	OperationName       attribute.Key = "gen_ai.operation.name"
	RequestModel        attribute.Key = "gen_ai.request.model"
	RequestID           attribute.Key = "gen_ai.request.id"
	UsageInputTokens    attribute.Key = "gen_ai.usage.input_tokens"
	UsageOutputTokens   attribute.Key = "gen_ai.usage.output_tokens"
	UsageCacheReadInput attribute.Key = "gen_ai.usage.cache_read.input_tokens"
	FinishReasons       attribute.Key = "gen_ai.response.finish_reasons"
	ErrorType           attribute.Key = "error.type"

	// Sampling parameters.
	RequestTemperature      attribute.Key = "gen_ai.request.temperature"
	RequestTopP             attribute.Key = "gen_ai.request.top_p"
	RequestTopK             attribute.Key = "gen_ai.request.top_k"
	RequestMaxTokens        attribute.Key = "gen_ai.request.max_tokens"
	RequestSeed             attribute.Key = "gen_ai.request.seed"
	RequestChoiceCount      attribute.Key = "gen_ai.request.choice.count"
	RequestFrequencyPenalty attribute.Key = "gen_ai.request.frequency_penalty"
	RequestPresencePenalty  attribute.Key = "gen_ai.request.presence_penalty"
	RequestStopSequences    attribute.Key = "gen_ai.request.stop_sequences"

	// Latency keys shared by vLLM, SGLang and TensorRT-LLM request spans, in
	// seconds.
	LatencyTimeToFirstToken attribute.Key = "gen_ai.latency.time_to_first_token"
	LatencyE2E              attribute.Key = "gen_ai.latency.e2e"
	LatencyTimeInQueue      attribute.Key = "gen_ai.latency.time_in_queue"
	LatencyPrefill          attribute.Key = "gen_ai.latency.time_in_model_prefill"
	LatencyDecode           attribute.Key = "gen_ai.latency.time_in_model_decode"
	LatencyInference        attribute.Key = "gen_ai.latency.time_in_model_inference"

	// Opt-in content capture (SPEC §6).
	InputMessages  attribute.Key = "gen_ai.input.messages"
	OutputMessages attribute.Key = "gen_ai.output.messages"
)

// llmtrace's own keys.
const (
	Preemptions attribute.Key = "llm.preemptions"
	// TimePerOutputToken is TPOT in seconds on the root span.
	TimePerOutputToken attribute.Key = "llm.latency.time_per_output_token"
	// PreemptedTime is the time spent preempted, in seconds, on the root span.
	PreemptedTime attribute.Key = "llm.latency.time_preempted"
	// RecomputeCachedTokens counts prefix-cache hits during recompute
	// prefills; they are not prefix-cache hits of the request (SPEC §2).
	RecomputeCachedTokens attribute.Key = "llm.prefill.recompute_cached_tokens"
	// RequestScope is the namespace a request id is unique in.
	RequestScope attribute.Key = "llm.request.scope"

	QueueReason           attribute.Key = "llm.queue.reason"
	PrefillComputedTokens attribute.Key = "llm.prefill.computed_tokens"
	PrefillCachedTokens   attribute.Key = "llm.prefill.cached_tokens"
	PrefillChunks         attribute.Key = "llm.prefill.chunks"
	PrefillRecompute      attribute.Key = "llm.prefill.recompute"
	DecodeOutputTokens    attribute.Key = "llm.decode.output_tokens"
	DecodeSegment         attribute.Key = "llm.decode.segment"
	DetokenizeBusyTime    attribute.Key = "llm.detokenize.busy_time"
	DetokenizeDeliveries  attribute.Key = "llm.detokenize.deliveries"

	FinishReason    attribute.Key = "llm.finish_reason"
	RejectionReason attribute.Key = "llm.rejection.reason"
	ClampedSpans    attribute.Key = "llm.spans.clamped"
	SamplingReason  attribute.Key = "llm.sampling.reason"

	// DecodeTokenOffsets are a decode segment's token delivery times in
	// microseconds from the segment's start (detail level 3).
	DecodeTokenOffsets attribute.Key = "llm.decode.token_offsets_us"

	// Event attributes.
	StepIndex     attribute.Key = "llm.step.index"
	StepBatchSize attribute.Key = "llm.step.batch_size"
	ChunkIndex    attribute.Key = "llm.prefill.chunk"
	EventTokens   attribute.Key = "llm.tokens"
)

// Values of QueueReason.
const (
	QueueReasonNew       = "new"
	QueueReasonPreempted = "preempted"
)

// OtherModel is the value of RequestModel on metrics for models outside the
// configured set, which keeps metric cardinality bounded.
const OtherModel = "other"

// Reconstruction of engines' single request spans (SPEC §10; package
// reconstruct).
const (
	// Reconstructed marks a child span rebuilt from an engine's request
	// span rather than recorded from lifecycle updates.
	Reconstructed attribute.Key = "llm.reconstructed"
	// ReconstructClamped counts, on the engine's span, the values that
	// contradicted each other and were clamped or dropped.
	ReconstructClamped attribute.Key = "llm.reconstruct.clamped"
	// ReconstructEngine names, on the engine's span, the mapping that
	// rebuilt its children (vllm, vllm-v0, sglang, tensorrt-llm); its
	// presence also marks the span as expanded once.
	ReconstructEngine attribute.Key = "llm.reconstruct.engine"

	// Keys the engines spell on their own request spans (read, never
	// emitted): vLLM, SGLang and TensorRT-LLM use the pre-1.27 GenAI
	// usage names.
	EngineUsagePromptTokens     attribute.Key = "gen_ai.usage.prompt_tokens"
	EngineUsageCompletionTokens attribute.Key = "gen_ai.usage.completion_tokens"
	EngineUsageCachedTokens     attribute.Key = "gen_ai.usage.cached_tokens"
	LatencyTimeInScheduler      attribute.Key = "gen_ai.latency.time_in_scheduler"
	LatencyTimeInModelForward   attribute.Key = "gen_ai.latency.time_in_model_forward"
)
