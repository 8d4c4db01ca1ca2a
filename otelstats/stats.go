package otelstats

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/llmtrace/llmtrace/internal/unixsec"
)

// Latency is a duration that may be absent: a value whose instants never
// happened (an abort before the first token has no TTFT) is not Valid, never
// zero and never a huge number from an unset timestamp.
type Latency struct {
	Value time.Duration
	Valid bool
}

func some(d time.Duration) Latency {
	if d < 0 {
		// Only clock skew between two processes can make a derived
		// duration negative; the instants are real, the order is not.
		d = 0
	}
	return Latency{Value: d, Valid: true}
}

// Seconds returns the value in seconds and whether it is present.
func (l Latency) Seconds() (float64, bool) { return l.Value.Seconds(), l.Valid }

// Count is a token count that may be unknown.
type Count struct {
	N     int
	Valid bool
}

// RequestStats is one finished request, materialized from its updates (vLLM
// V1's RequestStats). The fields are SPEC §2's; MarshalJSON writes them under
// SPEC's names (e2e_latency_s, ...), omitting absent values.
type RequestStats struct {
	RequestID string
	Scope     string
	Model     string
	Operation string
	// FinishReason is the frontend's when both sides gave one.
	FinishReason string
	// FinishReasons are the reasons of the response's choices, in choice
	// order, when the frontend reported them (Update.FinishReasons, n > 1)
	// and the request ended with its FinishReason; nil otherwise. The
	// root's gen_ai.response.finish_reasons lists them.
	FinishReasons []string
	ErrorType     string

	ArrivalTime  time.Time
	FinishedTime time.Time

	E2ELatency        Latency // FINISHED − ARRIVED
	QueueDuration     Latency // first PREFILLING − first QUEUED
	FirstTokenLatency Latency // TTFT: first token − ARRIVED
	PrefillLatency    Latency // first token − first PREFILLING
	DecodeLatency     Latency // FINISHED − first token
	InferenceLatency  Latency // FINISHED − first PREFILLING
	// TimePerOutputToken is DecodeLatency / (NumOutputTokens − 1), present
	// with more than one output token.
	TimePerOutputToken Latency
	// PreemptedDuration sums PREEMPTED → next PREFILLING (or FINISHED),
	// each wait clamped into the request as its llm.queue span is.
	PreemptedDuration time.Duration
	// OutputTokenLatencies are the gaps between successive token-bearing
	// deliveries, one per delivery; kept only with WithTokenLatencies, nil
	// when no token has a time (empty for one token).
	OutputTokenLatencies []time.Duration

	NumPromptTokens Count
	NumOutputTokens int
	NumPreemptions  int
	// NumCachedTokens are the prompt tokens served from the prefix cache at
	// the first scheduling; when the engine reported no scheduling, the
	// cached prompt tokens of the response's usage (Request.CachedTokens),
	// and CachedFromUsage is set.
	NumCachedTokens Count
	// CachedFromUsage says NumCachedTokens is the response usage's count,
	// not the engine's: it is the root's gen_ai.usage.cache_read.input_tokens
	// but no prefix-cache query or hit (llm.server.prefix_cache.*, the stats
	// log's hit rate) and no llm.prefix_cache.hit_ratio.
	CachedFromUsage bool
	// NumRecomputeCachedTokens are cache hits during recompute prefills after
	// preemptions; they are not prefix-cache hits of the request.
	NumRecomputeCachedTokens int

	// Disaggregated prefill/decode (SPEC §7). PDRole is the instance's part;
	// the KV* fields and NumRemoteTokens describe a decode instance's
	// transfer (KVTransferDuration: REMOTE_KV_READY − REMOTE_KV_WAIT,
	// absent without a transfer, or while it never completed).
	// KVTransferBytes is REMOTE_KV_READY's kv_bytes, 0 when it reported
	// none (then absent from the JSON, the span and the byte counter).
	PDRole             string
	KVSource           string
	KVTransferDuration Latency
	NumRemoteTokens    int
	KVTransferBytes    int64
	KVTransferFailed   bool
	// PDPrefillDuration and PDDecodeTTFT are a router's view
	// (Request.RoutedPD): send to P → P's response, send to D → first token.
	PDPrefillDuration Latency
	PDDecodeTTFT      Latency

	// Speculative decoding (SPEC §8); the rate and the mean acceptance
	// length are meaningful only when NumSpecSteps > 0.
	NumDraftTokens           int
	NumAcceptedTokens        int
	NumSpecSteps             int
	SpecAcceptanceRate       float64 // accepted / draft
	SpecMeanAcceptanceLength float64 // 1 + accepted / steps (vLLM's)

	// LoRAAdapter served the request (SPEC §9).
	LoRAAdapter string
	// EncodeDuration sums the request's multimodal encoder runs (SPEC §9),
	// absent without one; NumEncoderRuns counts them.
	EncodeDuration Latency
	NumEncoderRuns int

	// TraceID and SpanID identify the request's root span.
	TraceID string
	SpanID  string
	// ClampedSpans counts spans clamped into the root because of skew.
	ClampedSpans int
	// Sampled says whether the trace was kept, SamplingReason why (see
	// SamplingPolicy): false when the policy dropped it or, on the Tracer
	// path, the TracerProvider did not sample its root (its sampler dropped
	// it, or the provider is a no-op or shut down).
	Sampled        bool
	SamplingReason string
}

// MarshalJSON writes the stats with SPEC §2's names, in a fixed order.
func (s *RequestStats) MarshalJSON() ([]byte, error) { return s.AppendJSON(nil), nil }

// AppendJSON appends the JSON object of MarshalJSON to dst.
func (s *RequestStats) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	dst = appendStr(dst, "request_id", s.RequestID, true)
	if s.Scope != "" {
		dst = appendStr(dst, "scope", s.Scope, false)
	}
	dst = appendStr(dst, "model", s.Model, false)
	dst = appendStr(dst, "operation", s.Operation, false)
	dst = appendStr(dst, "finish_reason", s.FinishReason, false)
	if len(s.FinishReasons) > 0 {
		dst = append(dst, `,"finish_reasons":`...)
		b, _ := json.Marshal(s.FinishReasons) // strings always marshal
		dst = append(dst, b...)
	}
	if s.ErrorType != "" {
		dst = appendStr(dst, "error_type", s.ErrorType, false)
	}
	dst = appendTime(dst, "arrival_time", s.ArrivalTime)
	dst = appendTime(dst, "finished_time", s.FinishedTime)
	dst = appendLatency(dst, "e2e_latency_s", s.E2ELatency)
	dst = appendLatency(dst, "queue_duration_s", s.QueueDuration)
	dst = appendLatency(dst, "first_token_latency_s", s.FirstTokenLatency)
	dst = appendLatency(dst, "prefill_latency_s", s.PrefillLatency)
	dst = appendLatency(dst, "decode_latency_s", s.DecodeLatency)
	dst = appendLatency(dst, "inference_latency_s", s.InferenceLatency)
	dst = appendLatency(dst, "time_per_output_token_s", s.TimePerOutputToken)
	dst = appendFloat(dst, "preempted_duration_s", s.PreemptedDuration.Seconds())
	if s.OutputTokenLatencies != nil {
		dst = append(dst, `,"output_token_latencies_s":[`...)
		for i, d := range s.OutputTokenLatencies {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendFloat(dst, d.Seconds(), 'g', -1, 64)
		}
		dst = append(dst, ']')
	}
	if s.NumPromptTokens.Valid {
		dst = appendInt(dst, "num_prompt_tokens", s.NumPromptTokens.N)
	}
	dst = appendInt(dst, "num_output_tokens", s.NumOutputTokens)
	dst = appendInt(dst, "num_preemptions", s.NumPreemptions)
	if s.NumCachedTokens.Valid {
		dst = appendInt(dst, "num_cached_tokens", s.NumCachedTokens.N)
		if s.CachedFromUsage {
			dst = appendBool(dst, "cached_from_usage", true)
		}
	}
	dst = appendInt(dst, "num_recompute_cached_tokens", s.NumRecomputeCachedTokens)
	dst = s.appendServing(dst)
	if s.TraceID != "" {
		dst = appendStr(dst, "trace_id", s.TraceID, false)
		dst = appendStr(dst, "span_id", s.SpanID, false)
	}
	if s.ClampedSpans > 0 {
		dst = appendInt(dst, "clamped_spans", s.ClampedSpans)
	}
	if s.SamplingReason != "" && s.SamplingReason != SampledAll {
		dst = appendStr(dst, "sampling_reason", s.SamplingReason, false)
	}
	return append(dst, '}')
}

// appendTime writes t as Unix seconds with nanosecond digits, exactly.
func appendTime(dst []byte, k string, t time.Time) []byte {
	if t.IsZero() {
		return dst
	}
	return unixsec.Append(appendKey(dst, k, false), t)
}

func appendKey(dst []byte, k string, first bool) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, k...)
	return append(dst, '"', ':')
}

func appendStr(dst []byte, k, v string, first bool) []byte {
	dst = appendKey(dst, k, first)
	b, _ := json.Marshal(v) // strings always marshal
	return append(dst, b...)
}

func appendFloat(dst []byte, k string, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return dst
	}
	dst = appendKey(dst, k, false)
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

func appendLatency(dst []byte, k string, l Latency) []byte {
	if !l.Valid {
		return dst
	}
	return appendFloat(dst, k, l.Value.Seconds())
}

func appendInt(dst []byte, k string, v int) []byte {
	dst = appendKey(dst, k, false)
	return strconv.AppendInt(dst, int64(v), 10)
}

// appendServing writes SPEC §7–9's fields, each only when the request had
// that feature.
func (s *RequestStats) appendServing(dst []byte) []byte {
	if s.PDRole != "" {
		dst = appendStr(dst, "pd_role", s.PDRole, false)
	}
	if s.KVSource != "" {
		dst = appendStr(dst, "kv_source", s.KVSource, false)
		dst = appendLatency(dst, "kv_transfer_duration_s", s.KVTransferDuration)
		dst = appendInt(dst, "num_remote_tokens", s.NumRemoteTokens)
		if s.KVTransferBytes > 0 { // absent when REMOTE_KV_READY reported none
			dst = appendInt(dst, "kv_transfer_bytes", int(s.KVTransferBytes))
		}
		dst = appendBool(dst, "kv_transfer_failed", s.KVTransferFailed)
	}
	dst = appendLatency(dst, "pd_prefill_duration_s", s.PDPrefillDuration)
	dst = appendLatency(dst, "pd_decode_ttft_s", s.PDDecodeTTFT)
	if s.NumSpecSteps > 0 {
		dst = appendInt(dst, "num_draft_tokens", s.NumDraftTokens)
		dst = appendInt(dst, "num_accepted_tokens", s.NumAcceptedTokens)
		dst = appendInt(dst, "num_spec_steps", s.NumSpecSteps)
		dst = appendFloat(dst, "spec_acceptance_rate", s.SpecAcceptanceRate)
		dst = appendFloat(dst, "spec_mean_acceptance_length", s.SpecMeanAcceptanceLength)
	}
	if s.LoRAAdapter != "" {
		dst = appendStr(dst, "lora_adapter", s.LoRAAdapter, false)
	}
	if s.NumEncoderRuns > 0 {
		dst = appendLatency(dst, "encode_duration_s", s.EncodeDuration)
		dst = appendInt(dst, "num_encoder_runs", s.NumEncoderRuns)
	}
	return dst
}

func appendBool(dst []byte, k string, v bool) []byte {
	dst = appendKey(dst, k, false)
	return strconv.AppendBool(dst, v)
}
