package attributes

import (
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// GenAI and general convention keys, from the semconv package of
// ConventionVersion.
const (
	OperationName       = semconv.GenAIOperationNameKey
	ProviderName        = semconv.GenAIProviderNameKey // required on the root span and the gen_ai.server.* metrics
	RequestModel        = semconv.GenAIRequestModelKey
	UsageInputTokens    = semconv.GenAIUsageInputTokensKey
	UsageOutputTokens   = semconv.GenAIUsageOutputTokensKey
	UsageCacheReadInput = semconv.GenAIUsageCacheReadInputTokensKey
	FinishReasons       = semconv.GenAIResponseFinishReasonsKey
	ResponseID          = semconv.GenAIResponseIDKey
	ResponseModel       = semconv.GenAIResponseModelKey
	ErrorType           = semconv.ErrorTypeKey

	// Sampling parameters. gen_ai.request.top_k is a double in the
	// registry, though engines take an integer.
	RequestTemperature      = semconv.GenAIRequestTemperatureKey
	RequestTopP             = semconv.GenAIRequestTopPKey
	RequestTopK             = semconv.GenAIRequestTopKKey
	RequestMaxTokens        = semconv.GenAIRequestMaxTokensKey
	RequestSeed             = semconv.GenAIRequestSeedKey
	RequestChoiceCount      = semconv.GenAIRequestChoiceCountKey
	RequestFrequencyPenalty = semconv.GenAIRequestFrequencyPenaltyKey
	RequestPresencePenalty  = semconv.GenAIRequestPresencePenaltyKey
	RequestStopSequences    = semconv.GenAIRequestStopSequencesKey

	// Opt-in content capture (SPEC §6).
	InputMessages  = semconv.GenAIInputMessagesKey
	OutputMessages = semconv.GenAIOutputMessagesKey
)

// Vendor keys in the gen_ai namespace that the conventions do not define,
// kept on purpose: vLLM, SGLang and TensorRT-LLM put them on their request
// spans, so dashboards and queries written for those engines keep working.
const (
	// RequestID is the engine's request id.
	RequestID attribute.Key = "gen_ai.request.id"

	// Latency keys shared by vLLM, SGLang and TensorRT-LLM request spans, in
	// seconds.
	LatencyTimeToFirstToken attribute.Key = "gen_ai.latency.time_to_first_token"
	LatencyE2E              attribute.Key = "gen_ai.latency.e2e"
	LatencyTimeInQueue      attribute.Key = "gen_ai.latency.time_in_queue"
	LatencyPrefill          attribute.Key = "gen_ai.latency.time_in_model_prefill"
	LatencyDecode           attribute.Key = "gen_ai.latency.time_in_model_decode"
	LatencyInference        attribute.Key = "gen_ai.latency.time_in_model_inference"
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
	// TruncatedKey names the attribute whose value was cut
	// (llm.attributes.truncated).
	TruncatedKey attribute.Key = "llm.truncated.key"

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
