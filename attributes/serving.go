package attributes

import "go.opentelemetry.io/otel/attribute"

// Names of SPEC §7–9: disaggregated prefill/decode, speculative decoding,
// LoRA adapters and multimodal encoding. All llmtrace's own: the
// conventions have none of them yet.

// Spans.
const (
	// SpanKVTransfer is a decode instance waiting for a request's KV cache
	// from the prefill instance: REMOTE_KV_WAIT → REMOTE_KV_READY.
	SpanKVTransfer = "llm.kv_transfer"
	// SpanEncode is one multimodal encoder run: ENCODING → ENCODED.
	SpanEncode = "llm.encode"
)

// Span and metric attributes.
const (
	// PDRole is an instance's part in disaggregated serving: "prefill" or
	// "decode"; absent on a unified instance. On the root and on every
	// metric of the instance.
	PDRole attribute.Key = "llm.pd.role"
	// PDPrefillDuration and PDDecodeTTFT are the router's view, on its root
	// when it routes P/D itself: sending to P → P's response, and sending
	// to D → the first content token, in seconds.
	PDPrefillDuration attribute.Key = "llm.pd.prefill_duration_s"
	PDDecodeTTFT      attribute.Key = "llm.pd.decode_ttft_s"

	KVTransferTokens attribute.Key = "llm.kv_transfer.tokens"
	KVTransferBytes  attribute.Key = "llm.kv_transfer.bytes"
	KVTransferSource attribute.Key = "llm.kv_transfer.source"
	// PrefillRemoteTokens, on the first prefill after a transfer, are the
	// computed tokens whose KV came from the other instance: the run's own
	// work is computed − remote − cached.
	PrefillRemoteTokens attribute.Key = "llm.prefill.remote_tokens"
	// LatencyKVTransfer and LatencyEncode are the root's totals, in
	// seconds, beside gen_ai.latency.*.
	LatencyKVTransfer attribute.Key = "llm.latency.kv_transfer"
	LatencyEncode     attribute.Key = "llm.latency.encode"

	SpecDraftTokens          attribute.Key = "llm.spec_decode.draft_tokens"
	SpecAcceptedTokens       attribute.Key = "llm.spec_decode.accepted_tokens"
	SpecSteps                attribute.Key = "llm.spec_decode.steps"
	SpecAcceptanceRate       attribute.Key = "llm.spec_decode.acceptance_rate"
	SpecMeanAcceptanceLength attribute.Key = "llm.spec_decode.mean_acceptance_length"
	// SpecPosition is the draft position (0 … 15; larger positions are
	// summed in 15) of llm.server.spec_decode.accepted_tokens_per_position.
	SpecPosition attribute.Key = "llm.spec_decode.position"

	// LoRAAdapter is the adapter that served the request (the model stays
	// what the client asked for). On the root and on every metric, where
	// adapters outside the configured set collapse to OtherModel.
	LoRAAdapter attribute.Key = "llm.lora.adapter"

	EncodeItems    attribute.Key = "llm.encode.items"
	EncodeTokens   attribute.Key = "llm.encode.tokens"
	EncodeCacheHit attribute.Key = "llm.encode.cache_hit"

	// PrefixCacheHitRatio is cached / prompt tokens at the first
	// scheduling, on the root.
	PrefixCacheHitRatio attribute.Key = "llm.prefix_cache.hit_ratio"
)

// Values.
const (
	// QueueReasonKVReady is the wait between the KV cache's arrival and
	// the next PREFILLING on a decode instance.
	QueueReasonKVReady = "kv_ready"
	// ErrorKVTransferFailed is the kv_transfer span's error.type when the
	// transfer failed and the prompt is recomputed.
	ErrorKVTransferFailed = "kv_transfer_failed"
)

// Metric names of SPEC §7–9.
const (
	MetricKVTransferDuration      = "llm.server.kv_transfer.duration"
	MetricKVTransferTokens        = "llm.server.kv_transfer.tokens"
	MetricKVTransferBytes         = "llm.server.kv_transfer.bytes"
	MetricKVTransferFailures      = "llm.server.kv_transfer.failures"
	MetricSpecDraftTokens         = "llm.server.spec_decode.draft_tokens"
	MetricSpecAcceptedTokens      = "llm.server.spec_decode.accepted_tokens"
	MetricSpecSteps               = "llm.server.spec_decode.steps"
	MetricSpecAcceptedPerPosition = "llm.server.spec_decode.accepted_tokens_per_position"
	MetricSpecAcceptanceRate      = "llm.server.spec_decode.acceptance_rate"
	MetricEncodeDuration          = "llm.server.encode.duration"
)

// Units of SPEC §7–9's metrics.
const (
	UnitByte     = "By"
	UnitTransfer = "{transfer}"
	UnitStep     = "{step}"
)

// SpecPositions is how many draft positions
// llm.server.spec_decode.accepted_tokens_per_position tells apart.
const SpecPositions = 16

// AcceptanceRateBuckets bound llm.server.spec_decode.acceptance_rate, a
// ratio from 0 to 1.
func AcceptanceRateBuckets() []float64 {
	return []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
}
