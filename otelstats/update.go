package otelstats

import (
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Kind is the kind of a lifecycle update (SPEC §1, §7, §9). The first
// eight's numeric values are vLLM V1's RequestStatsUpdate.Type values plus
// one, so the zero Kind is invalid.
type Kind uint8

// The update kinds.
const (
	KindArrived Kind = iota + 1
	KindInputProcessed
	KindQueued
	KindPrefilling
	KindPreempted
	KindDecoding
	KindDetokenized
	KindFinished
	// KindRemoteKVWait: the scheduler started loading the request's KV
	// cache from another instance (disaggregated prefill/decode, SPEC §7).
	KindRemoteKVWait
	// KindRemoteKVReady: that KV cache arrived, or the transfer failed.
	KindRemoteKVReady
	// KindEncoding and KindEncoded bracket a multimodal encoder run (SPEC §9).
	KindEncoding
	KindEncoded

	kindCount // one past the last kind
)

var kindNames = [...]string{"", "ARRIVED", "INPUT_PROCESSED", "QUEUED", "PREFILLING", "PREEMPTED", "DECODING", "DETOKENIZED", "FINISHED",
	"REMOTE_KV_WAIT", "REMOTE_KV_READY", "ENCODING", "ENCODED"}

func (k Kind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool { return k >= KindArrived && k < kindCount }

// ParseKind parses a kind's name, case-insensitively.
func ParseKind(s string) (Kind, bool) {
	for k := KindArrived; k < kindCount; k++ {
		if strings.EqualFold(s, kindNames[k]) {
			return k, true
		}
	}
	return 0, false
}

// Side is who recorded an update.
type Side uint8

// Sides. SideAuto lets the kind decide: FINISHED defaults to the frontend,
// every other kind has exactly one side.
const (
	SideAuto Side = iota
	SideFrontend
	SideEngine
)

func (s Side) String() string {
	switch s {
	case SideFrontend:
		return "frontend"
	case SideEngine:
		return "engine"
	}
	return "auto"
}

// ParseSide parses "frontend" or "engine" ("" is SideAuto).
func ParseSide(s string) (Side, bool) {
	switch strings.ToLower(s) {
	case "":
		return SideAuto, true
	case "frontend":
		return SideFrontend, true
	case "engine":
		return SideEngine, true
	}
	return 0, false
}

// sideOf is the side that records k, or SideAuto for FINISHED.
func sideOf(k Kind) Side {
	switch k {
	case KindArrived, KindInputProcessed, KindDetokenized:
		return SideFrontend
	case KindQueued, KindPrefilling, KindPreempted, KindDecoding,
		KindRemoteKVWait, KindRemoteKVReady, KindEncoding, KindEncoded:
		return SideEngine
	}
	return SideAuto
}

// Finish reasons with a meaning to llmtrace. Any other non-empty reason is
// accepted and passed through.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
	FinishError  = "error"
	// FinishAbandoned ends a request that stopped receiving updates for
	// longer than the request TTL.
	FinishAbandoned = "abandoned"
	// FinishEvicted ends the oldest in-flight request when the in-flight cap
	// is reached.
	FinishEvicted = "evicted"
	// FinishUnfinished ends requests still in flight at Shutdown.
	FinishUnfinished = "unfinished"
)

// PD roles (ARRIVED's PDRole) and KV transfer outcomes (REMOTE_KV_READY's
// KVStatus).
const (
	PDRolePrefill = "prefill"
	PDRoleDecode  = "decode"

	KVStatusOK     = "ok"
	KVStatusFailed = "failed"

	// FinishRemoteDecode is the finish reason a prefill instance may
	// report when it hands the request to a decode instance.
	FinishRemoteDecode = "remote_decode"
)

// isFailure reports whether a finish reason marks the root span as an error
// and puts error.type on the request duration.
func isFailure(reason string) bool {
	switch reason {
	case FinishAbort, FinishError, FinishAbandoned, FinishEvicted, FinishUnfinished:
		return true
	}
	return false
}

// SamplingParams are a request's sampling parameters; nil fields were not
// given. They become gen_ai.request.* attributes on the root span.
type SamplingParams struct {
	Temperature      *float64 `json:"temperature,omitempty"`
	TopP             *float64 `json:"top_p,omitempty"`
	TopK             *int64   `json:"top_k,omitempty"`
	MaxTokens        *int64   `json:"max_tokens,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	N                *int64   `json:"n,omitempty"`
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	Stop             []string `json:"stop,omitempty"`
}

// IsZero reports whether p is nil or sets no parameter.
func (p *SamplingParams) IsZero() bool {
	return p == nil || (p.Temperature == nil && p.TopP == nil && p.TopK == nil && p.MaxTokens == nil &&
		p.Seed == nil && p.N == nil && p.FrequencyPenalty == nil && p.PresencePenalty == nil && len(p.Stop) == 0)
}

// Update is one lifecycle transition of one request (vLLM V1's
// RequestStatsUpdate). Which payload fields matter depends on Kind:
//
//	ARRIVED          Model (required), Operation (default "chat"), Scope,
//	                 PDRole, LoRAAdapter (optional)
//	INPUT_PROCESSED  NumPromptTokens, Sampling (optional)
//	QUEUED           —
//	REMOTE_KV_WAIT   KVSource (required), NumRemoteTokens (optional)
//	REMOTE_KV_READY  NumRemoteTokens (required), KVBytes, KVStatus (optional)
//	ENCODING         NumItems (required), NumEncoderTokens (optional)
//	ENCODED          EncoderCacheHit (optional)
//	PREFILLING       NumComputedTokens, NumCachedTokens
//	PREEMPTED        —
//	DECODING         NumNewTokens (0 means 1, in a speculative step
//	                 NumAcceptedTokens + 1); NumDraftTokens and
//	                 NumAcceptedTokens of a speculative step (optional)
//	DETOKENIZED      NumNewTokens (0 is a delivery without tokens), Busy
//	FINISHED         FinishReason (required), ErrorType (optional),
//	                 NumPromptTokens (optional, when INPUT_PROCESSED gave none),
//	                 NumOutputTokens (optional, frontend: a response
//	                 delivered in one piece, see below), FinishReasons
//	                 (optional, frontend: one per choice, see below)
type Update struct {
	RequestID string
	Kind      Kind
	Side      Side
	Time      time.Time

	// Scope and Model select among in-flight requests sharing an id; on
	// ARRIVED they are the request's own.
	Scope     string
	Model     string
	Operation string

	NumPromptTokens   int
	NumComputedTokens int
	NumCachedTokens   int
	NumNewTokens      int
	// NumOutputTokens, on the frontend's FINISHED, is the size of an output
	// delivered in one piece rather than streamed (a non-streamed HTTP
	// response's usage): the tokens count, but they have no token times,
	// so TTFT, TPOT, ITL, prefill and decode stay absent (SPEC §2) unless
	// the engine's DECODING times stand in. Ignored when the frontend
	// delivered tokens with DETOKENIZED.
	NumOutputTokens int

	// Disaggregated prefill/decode (SPEC §7). PDRole, on ARRIVED, is
	// PDRolePrefill or PDRoleDecode ("" for a unified instance); KVSource
	// names the instance the KV cache comes from; NumRemoteTokens counts
	// the prompt tokens whose KV arrived; KVBytes their size, 0 when not
	// reported; KVStatus is KVStatusOK (the default when empty) or
	// KVStatusFailed.
	PDRole          string
	KVSource        string
	NumRemoteTokens int
	KVBytes         int64
	KVStatus        string

	// Speculative decoding (SPEC §8): on DECODING, the tokens the draft
	// proposed in this step and how many of them the target accepted (a
	// prefix). A step with NumDraftTokens 0 is not speculative.
	NumDraftTokens    int
	NumAcceptedTokens int

	// LoRAAdapter, on ARRIVED, is the adapter that serves the request; Model
	// stays what the client asked for (SPEC §9).
	LoRAAdapter string

	// Parent, on ARRIVED, is the request's incoming trace context — a
	// router's, from the traceparent it sent — so an instance fed through
	// the update log joins the router's trace (SPEC §7) as Arrive's ctx
	// does. Whether its sampled flag decides is WithTrustParentSampling's.
	Parent trace.SpanContext

	// Multimodal encoding (SPEC §9): NumItems (required on ENCODING) and
	// NumEncoderTokens (0: not reported) of an encoder run; EncoderCacheHit
	// on ENCODED.
	NumItems         int
	NumEncoderTokens int
	EncoderCacheHit  bool
	// Busy is the time the detokenizer spent on this delivery, if known.
	Busy         time.Duration
	FinishReason string
	// FinishReasons, on the frontend's FINISHED, are the finish reasons
	// of a response's choices in choice order (n > 1; choices without one
	// left out), FinishReason being the request's own (the one its
	// metrics carry in llm.finish_reason). When the request ends with
	// that FinishReason, the root's gen_ai.response.finish_reasons lists
	// them instead of FinishReason alone; otherwise (an abort, the
	// tracker ending it) they are dropped. At most MaxChoiceFinishReasons
	// are kept, each cut like FinishReason; further ones are dropped and
	// counted in llm.attributes.truncated. The tracker copies them.
	FinishReasons []string
	ErrorType     string
	Sampling      *SamplingParams

	// Set by Step and Arrive only.
	step        int64
	batch       int32
	detail      Detail
	trustParent bool
	link        trace.SpanContext
	feFinishes  bool // Arrival.FrontendFinishes
}

// Limits on update payloads, so a hostile or broken producer cannot make
// the tracker hold megabytes per request or export unbounded attributes.
// Identities — the request id and the scope — longer than their cap are
// rejected as too_long (cutting could merge two requests); the model,
// operation, finish reason, error type and stop sequences are cut at their
// cap (on a UTF-8 boundary) and counted in llm.attributes.truncated, so the
// request is still traced. Larger counts are rejected as absurd.
const (
	MaxIDLength      = 512
	MaxModelLength   = 256
	MaxNameLength    = 64 // operation, scope, finish reason, error type
	MaxStopSequences = 8  // more are dropped
	MaxStopLength    = 128
	MaxTokenCount    = 1 << 30
	// MaxRootAttributes bounds the attributes Request.SetAttributes adds.
	MaxRootAttributes = 32
	// MaxChoiceFinishReasons bounds FINISHED's FinishReasons: the
	// entries of gen_ai.response.finish_reasons.
	MaxChoiceFinishReasons = 16
	maxNewTokensStep       = 1 << 20
	// maxBusy bounds one delivery's busy time: an hour of detokenizing is
	// a broken clock, and the request's sum must not wrap.
	maxBusy = time.Hour
)

// minTime and maxTime bound acceptable timestamps: 1970 to 2200. Times are
// kept as int64 Unix nanoseconds, which end in 2262; 2200 leaves room for
// durations added to them (TTL, grace, hold window).
var (
	minTime = time.Unix(1, 0)
	maxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

	minNs, maxNs = minTime.UnixNano(), maxTime.UnixNano()
)

// validNs is the fast paths' time check on a time already mapped through the
// tracker's anchor: the same bounds as check's.
func validNs(ns int64) bool { return ns >= minNs && ns <= maxNs }
