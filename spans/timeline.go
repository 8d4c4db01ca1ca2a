package spans

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Timeline is what the tracker knows about one finished request, reduced to
// the instants that bound its spans. Times are Unix nanoseconds, as the
// tracker keeps them and the SDK exports them; 0 means "never happened".
type Timeline struct {
	// Name is the root span's name, "{operation} {model}".
	Name string
	// TraceID and SpanID, when valid, are the ids the root span should get
	// (they were handed out at arrival for propagation); see IDGenerator.
	TraceID trace.TraceID
	SpanID  trace.SpanID
	// Parent is an incoming remote parent (from traceparent), if any.
	Parent trace.SpanContext
	// Link, when valid, is a span the root links to without joining its
	// trace: an untrusted caller's (see otelstats.Arrival.Link).
	Link trace.SpanContext

	Start int64 // ARRIVED
	End   int64 // the request's FINISHED (the frontend's when both report)
	// EngineEnd ends the last run or wait: the engine's FINISHED, or End when
	// the engine did not report one.
	EngineEnd int64

	RootAttrs  []attribute.KeyValue
	Status     codes.Code
	StatusDesc string

	InputProcessed int64 // 0 if never reported
	InputTokens    int   // -1 if unknown

	// FirstQueued is the first QUEUED, 0 if never queued; after a later
	// InputProcessed the gap between them is the llm.handoff span.
	FirstQueued int64
	// KVTransfer is a decode instance's transfer of the request's KV cache
	// (SPEC §7), between the first wait and the first run; nil without one.
	KVTransfer *KVTransfer
	Runs       []Run
	// Encodes are the request's multimodal encoder runs (SPEC §9).
	Encodes []Encode

	Detokenize *Detokenize // nil if the frontend delivered nothing

	// RootOnly emits the root span alone (detail level 0).
	RootOnly bool
}

// Run is the time between a PREFILLING that follows QUEUED or PREEMPTED and
// the next PREEMPTED or FINISHED.
type Run struct {
	Start      int64 // first PREFILLING of the run
	FirstToken int64 // first token time in the run; 0 if none
	// Preempted is when the run ended by preemption; 0 for the last run.
	Preempted      int64
	ComputedTokens int
	CachedTokens   int
	// RemoteTokens, on the run after a KV transfer, are the computed tokens
	// whose KV came from the other instance.
	RemoteTokens int
	Chunks       int
	OutputTokens int
	// Speculative decoding in the run's decode segment (SPEC §8); steps 0:
	// none.
	DraftTokens, AcceptedTokens, SpecSteps int
	// Chunks after the first, for the per-chunk events.
	ChunkEvents []ChunkEvent
	// Steps, when set, become llm.decode.step events on the run's decode
	// span (detail level 2).
	Steps []StepEvent
	// TokenTimes, when set, become the decode span's
	// llm.decode.token_offsets_us attribute (detail level 3).
	TokenTimes []int64
}

// KVTransfer is a decode instance waiting for the request's KV cache.
type KVTransfer struct {
	Wait, Ready int64 // REMOTE_KV_WAIT, REMOTE_KV_READY (0: never came)
	Source      string
	Tokens      int
	Bytes       int64 // 0: not reported, and the span has no llm.kv_transfer.bytes
	Failed      bool
}

// Encode is one multimodal encoder run.
type Encode struct {
	Start, End int64
	Items      int
	Tokens     int // 0: not reported, and the span has no llm.encode.tokens
	CacheHit   bool
}

// StepEvent is one engine step that produced tokens for the request.
// Index (from 1) and BatchSize are 0 when the engine did not say them.
type StepEvent struct {
	Time      int64
	Index     int64
	BatchSize int
}

// ChunkEvent is a further chunk of a chunked prefill.
type ChunkEvent struct {
	Time           int64
	ComputedTokens int
}

// Detokenize bounds the frontend's deliveries.
type Detokenize struct {
	First, Last int64
	// Busy sums the busy times the deliveries reported; 0: none did, and
	// the span has no llm.detokenize.busy_time.
	Busy       time.Duration
	Deliveries int
}
