package spans

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Timeline is what the tracker knows about one finished request, reduced to
// the instants that bound its spans. Zero times mean "never happened".
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

	Start time.Time // ARRIVED
	End   time.Time // the request's FINISHED (the frontend's when both report)
	// EngineEnd ends the last run or wait: the engine's FINISHED, or End when
	// the engine did not report one.
	EngineEnd time.Time

	RootAttrs  []attribute.KeyValue
	Status     codes.Code
	StatusDesc string

	InputProcessed time.Time // zero if never reported
	InputTokens    int       // -1 if unknown

	// FirstQueued is the first QUEUED, zero if never queued; after a later
	// InputProcessed the gap between them is the llm.handoff span.
	FirstQueued time.Time
	Runs        []Run

	Detokenize *Detokenize // nil if the frontend delivered nothing

	// RootOnly emits the root span alone (detail level 0).
	RootOnly bool
}

// Run is the time between a PREFILLING that follows QUEUED or PREEMPTED and
// the next PREEMPTED or FINISHED.
type Run struct {
	Start      time.Time // first PREFILLING of the run
	FirstToken time.Time // first token time in the run; zero if none
	// Preempted is when the run ended by preemption; zero for the last run.
	Preempted      time.Time
	ComputedTokens int
	CachedTokens   int
	Chunks         int
	OutputTokens   int
	// Chunks after the first, for the per-chunk events.
	ChunkEvents []ChunkEvent
	// Steps, when set, become llm.decode.step events on the run's decode
	// span (detail level 2).
	Steps []StepEvent
	// TokenTimes, when set, become the decode span's
	// llm.decode.token_offsets_us attribute (detail level 3).
	TokenTimes []time.Time
}

// StepEvent is one engine step that produced tokens for the request.
type StepEvent struct {
	Time      time.Time
	Index     int64
	BatchSize int
}

// ChunkEvent is a further chunk of a chunked prefill.
type ChunkEvent struct {
	Time           time.Time
	ComputedTokens int
}

// Detokenize bounds the frontend's deliveries.
type Detokenize struct {
	First, Last time.Time
	Busy        time.Duration
	Deliveries  int
}
