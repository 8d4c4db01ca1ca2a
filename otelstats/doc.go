// Package otelstats records the lifecycle of LLM inference requests and
// turns each one into an OpenTelemetry trace and the serving metrics of
// ../SPEC.md (TTFT, TPOT, inter-token latency, queue, prefill, decode and
// inference time, preemptions, prefix-cache hits).
//
// The design follows vLLM V1's request stats: two sides record Updates — the
// frontend (arrival, input processing, detokenization, finish as the client
// saw it) and the engine core (queueing, prefill chunks, preemption, decoding,
// finish). A Tracker validates every update against the request's lifecycle,
// keeps a small bounded state per in-flight request, and when the request
// finishes materializes its RequestStats, emits its span tree with explicit
// timestamps and records its metrics — for every request, sampled or not.
//
// Three ways in:
//
//   - Tracker.Arrive returns a *Request handle for frontends.
//   - Tracker.Step records one engine scheduler step for many requests at
//     once, without allocating per request or per token. Entries name a
//     request by its *Request handle (the fast path: a decode token is a
//     lock and a few stores) or by id.
//   - Tracker.Record takes any single Update, e.g. parsed from the update log
//     (ParseUpdate), which is how engines in other languages reach us.
//
// # Request ids
//
// A request id is unique within a scope. An update names its request by id
// and, optionally, by Scope (a tenant, an engine instance) and Model. An
// update that leaves Scope or Model empty matches any in-flight request with
// that id, as long as exactly one does; two in-flight requests may share an
// id when their scope or model differs, and then updates for them must say
// which. A second ARRIVED with the same id, scope and model while the first
// is in flight is rejected.
//
// # Cost
//
// Each request has its own lock, so the engine loop and frontends meet only
// on the same request at the same instant; the shards' locks guard only the
// id maps. A finished request's spans are built with every timestamp known:
// WithSpanProcessor hands them straight to the span processor instead of
// through the SDK's Tracer, and WithAggregator merges its histograms and
// counters in one lock instead of an SDK call per value. BENCHMARKS.md at
// the repository root has the measurements against hand-written
// OpenTelemetry instrumentation.
//
// # Time
//
// Every method that records takes the time of the event (the time.Time of the
// update or step), in the style of golang.org/x/time/rate, so simulations and
// replays use their own clock and tests need no fake one. Times taken with
// time.Now keep their monotonic reading: intervals within the process come
// from the monotonic clock, mapped onto wall time through the process's one
// anchor, taken when it started and shared by all its trackers (SPEC §5). Code that builds spans of its own
// beside a request's tree maps its times with Tracker.UnixNano, so they stay
// inside the root while the wall clock is slewed or stepped.
package otelstats
