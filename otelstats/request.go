package otelstats

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Arrival describes a request as the frontend receives it.
type Arrival struct {
	Time      time.Time
	Model     string
	Operation string // GenAI operation name; "chat" when empty
	Scope     string
	// Detail overrides the tracker's detail level for this request.
	Detail Detail
	// TrustParent lets this request's incoming parent (in Arrive's ctx)
	// decide sampling, as WithTrustParentSampling does for all requests:
	// for integrations that know per request whether the caller is trusted.
	TrustParent bool
	// Link, when valid, is a span the root span links to without joining
	// its trace: an untrusted caller's, whose trace id the request must
	// not adopt, stays reachable from the request's own new trace.
	Link trace.SpanContext
	// TraceID, when valid and ctx carries no parent, is the trace id of
	// the request's root span instead of a fresh one: for a proxy that
	// sends the traceparent upstream before the body has told it the
	// model Arrive needs.
	TraceID trace.TraceID
	// Head is the head sampler's decision when the caller asked for it
	// before arriving (Tracker.HeadSample); HeadUndecided has Arrive ask.
	Head HeadDecision
	// OnFinish, when set, is called with the request's stats once it has
	// finished, after the tracker's WithOnFinish hooks and on the same
	// goroutine: the caller of the FINISHED that completed it, or the
	// sweep, eviction or Shutdown that ended it. It must not retain the
	// pointer. An HTTP layer learns here whether the trace was kept.
	OnFinish func(*RequestStats)
	// PDRole is this instance's part in disaggregated serving (PDRolePrefill,
	// PDRoleDecode; empty on a unified instance, SPEC §7).
	PDRole string
	// LoRAAdapter is the adapter serving the request (SPEC §9).
	LoRAAdapter string
	// FrontendFinishes says the caller is the request's frontend and will
	// record its FINISHED (an HTTP layer, a wrapper around the engine
	// call): an engine FINISHED that reaches the tracker first waits for
	// it, within the grace period, instead of ending the request (SPEC
	// §1). Without it an ARRIVED alone does not show that a frontend
	// reports: an engine may record its requests' arrivals itself.
	FrontendFinishes bool
}

// Request is a frontend's handle on one in-flight request. Its methods
// record that request's frontend updates without looking it up. A Request is
// safe for concurrent use; after the request finished, its methods return a
// RejectError with ReasonAfterFinished. A nil *Request (RequestFromContext
// of a ctx that carries none) is a handle too: its recording methods return
// an error and record nothing, its accessors return zero values.
//
// Engines can name a request by its handle in a Step (Decoded.Req and the
// like) instead of its id: that skips the id lookup, which is most of what
// recording a token would otherwise cost.
type Request struct {
	t *Tracker
	r *reqState
}

// Arrive records ARRIVED for request id and returns its handle. A valid span
// context in ctx (an incoming traceparent) becomes the root span's parent.
// Even a rejected arrival returns a usable handle whose methods are no-ops
// that return the same rejection, so callers need no nil checks on the hot
// path.
func (t *Tracker) Arrive(ctx context.Context, id string, a Arrival) (*Request, error) {
	u := Update{RequestID: id, Kind: KindArrived, Side: SideFrontend, Time: a.Time, Model: a.Model, Operation: a.Operation, Scope: a.Scope, detail: a.Detail, trustParent: a.TrustParent, link: a.Link,
		PDRole: a.PDRole, LoRAAdapter: a.LoRAAdapter, feFinishes: a.FrontendFinishes}
	if t.closed.Load() {
		return &Request{t: t}, t.rejected(reject(&u, SideFrontend, ReasonClosed, "the tracker is shut down"))
	}
	ns := t.ns(a.Time)
	t.capNames(&u)
	_, rerr := check(&u)
	if rerr == nil {
		rerr = t.aheadReject(&u, SideFrontend, ns)
	}
	if rerr != nil {
		return &Request{t: t}, t.rejected(rerr)
	}
	r, err := t.arrive(&u, ns, trace.SpanContextFromContext(ctx), &a)
	if err != nil {
		return &Request{t: t}, err
	}
	t.after(ns)
	return &r.h, nil
}

// ID returns the request's id.
func (q *Request) ID() string {
	if q == nil || q.r == nil {
		return ""
	}
	return q.r.id
}

// SpanContext is the span context the request's root span will have, known
// from arrival so it can be propagated downstream (traceparent) before the
// spans exist.
func (q *Request) SpanContext() trace.SpanContext {
	if q == nil || q.r == nil {
		return trace.SpanContext{}
	}
	return spanContextOf(q.r) // ids are fixed at arrival: no lock
}

// Context returns ctx carrying the request's root span context, so spans the
// engine or its outgoing calls start join the request's trace.
func (q *Request) Context(ctx context.Context) context.Context {
	if q == nil || q.r == nil {
		return ctx
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return trace.ContextWithSpanContext(ctx, spanContextOf(q.r))
}

// SetAttributes adds attributes to the request's root span, such as an
// HTTP layer's http.* keys; the caller bounds their values. At most
// MaxRootAttributes are kept; further ones are dropped and counted in
// llm.attributes.truncated. It fails once the request has finished. On a
// request the head sampler dropped (WithHeadSampler) it keeps nothing.
func (q *Request) SetAttributes(kvs ...attribute.KeyValue) error {
	if q == nil {
		return errNilRequest
	}
	t, r := q.t, q.r
	if r == nil {
		return errNotArrived
	}
	if r.headDropped {
		return nil // no root will carry them
	}
	r.mu.Lock()
	if r.done.Load() {
		r.mu.Unlock()
		return reject(&Update{RequestID: r.id}, SideFrontend, ReasonAfterFinished, "the request has finished")
	}
	x := r.ext()
	n := max(min(len(kvs), MaxRootAttributes-len(x.attrs)), 0)
	x.attrs = append(x.attrs, kvs[:n]...)
	r.mu.Unlock()
	for _, kv := range kvs[n:] {
		t.inst.countTruncated(kv.Key)
	}
	return nil
}

// CachedTokens records n, the prompt tokens the response's usage reports as
// read from a cache (usage.prompt_tokens_details.cached_tokens of
// chat/completions, usage.input_tokens_details.cached_tokens of the
// Responses API), for a frontend that sees the response but maybe not the
// engine: an HTTP layer, a proxy in front of a remote server. When the
// engine reported no scheduling of the request (no PREFILLING with its
// num_cached_tokens, which wins when present), n becomes
// RequestStats.NumCachedTokens, with CachedFromUsage set, and the root's
// gen_ai.usage.cache_read.input_tokens; 0 is a count. It is not a
// prefix-cache query or hit of SPEC §4 (the cache may be another server's)
// and sets no llm.prefix_cache.hit_ratio. Call it before the frontend's
// FINISHED; the latest call wins. It does not allocate.
func (q *Request) CachedTokens(n int) error {
	if q == nil {
		return errNilRequest
	}
	t, r := q.t, q.r
	if r == nil {
		if t == nil {
			return errNilRequest
		}
		return q.cachedReject(n, false)
	}
	if n < 0 || n > MaxTokenCount {
		return q.cachedReject(n, false)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return q.cachedReject(n, true)
	}
	r.feCached = int32(n) + 1
	return nil
}

// cachedReject is CachedTokens' rejection, built apart so that the
// accepted path does not allocate.
func (q *Request) cachedReject(n int, finished bool) error {
	t, r := q.t, q.r
	u := Update{Kind: KindFinished, Side: SideFrontend, NumCachedTokens: n}
	switch {
	case r == nil:
		return t.rejected(reject(&u, SideFrontend, ReasonUnknownRequest, "CachedTokens: the request's arrival was rejected"))
	case finished:
		u.RequestID = r.id
		return t.rejected(reject(&u, SideFrontend, ReasonAfterFinished, "CachedTokens: the request has finished"))
	}
	u.RequestID = r.id
	return t.rejected(checkCount(&u, SideFrontend, n, MaxTokenCount, "num_cached_tokens"))
}

// errNotArrived is SetAttributes' error on the handle of a rejected
// arrival.
var errNotArrived = errors.New("llmtrace: the request's arrival was rejected")

// Progress is what the tracker knows of the request at now while it is in
// flight: the fields of RequestStats whose instants have happened, with
// E2ELatency, DecodeLatency and InferenceLatency running up to now (or to
// the engine's FINISHED). ok is false once the request has finished; its
// final stats go to the OnFinish hooks. An HTTP layer uses it for the
// Server-Timing header of a response that is not streamed.
func (q *Request) Progress(now time.Time) (s RequestStats, ok bool) {
	if q == nil {
		return s, false
	}
	r := q.r
	if r == nil {
		return s, false
	}
	ns := q.t.ns(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return s, false
	}
	end := max(ns, r.arrived)
	s = RequestStats{RequestID: r.id, Scope: r.scope, Model: r.model, Operation: r.operation,
		ArrivalTime: tm(r.arrived), E2ELatency: some(time.Duration(end - r.arrived))}
	if r.prompt >= 0 {
		s.NumPromptTokens = Count{int(r.prompt), true}
	}
	if r.cached >= 0 {
		s.NumCachedTokens = Count{int(r.cached), true}
	}
	first := int64(0)
	switch {
	case r.feDeliv > 0:
		first, s.NumOutputTokens = r.feFirst, int(r.feTokens)
	case r.enDeliv > 0:
		first, s.NumOutputTokens = r.enFirst, int(r.enTokens)
	}
	in := func(v int64) int64 { return min(max(v, r.arrived), end) }
	stop := end
	if r.enFinish != 0 {
		stop = in(r.enFinish)
	}
	if r.firstQueued != 0 && r.firstPrefill != 0 {
		// SPEC §7: without the KV transfer, as the final value.
		s.QueueDuration = some(time.Duration(in(r.firstPrefill) - in(r.firstQueued) - r.transferNs(end)))
	}
	if r.firstPrefill != 0 {
		s.InferenceLatency = some(time.Duration(max(stop-in(r.firstPrefill), 0)))
	}
	if first != 0 {
		first = in(first)
		s.FirstTokenLatency = some(time.Duration(first - r.arrived))
		s.DecodeLatency = some(time.Duration(max(stop-first, 0)))
		if r.firstPrefill != 0 {
			s.PrefillLatency = some(time.Duration(max(first-in(r.firstPrefill), 0)))
		}
	}
	return s, true
}

// InputProcessed records INPUT_PROCESSED: tokenization and templating done.
// The tracker keeps a copy of sp.
func (q *Request) InputProcessed(at time.Time, promptTokens int, sp *SamplingParams) error {
	return q.Record(Update{Kind: KindInputProcessed, Time: at, NumPromptTokens: promptTokens, Sampling: sp})
}

// KeepAlive tells the tracker the request is still in progress at at
// without recording an update: its TTL (WithRequestTTL) counts from its
// latest update or KeepAlive. An HTTP layer that holds a stream's
// deliveries until its final usage says how large the prompt was calls it
// as the stream goes on, so that a long stream is not ended as abandoned
// while its chunks flow. Nothing else changes; a time out of bounds, a
// finished request, a rejected arrival's handle and a closed tracker are
// ignored. It does not allocate.
func (q *Request) KeepAlive(at time.Time) {
	if q == nil {
		return
	}
	t, r := q.t, q.r
	if r == nil || t.closed.Load() {
		return
	}
	ns := t.ns(at)
	if !t.inBound(ns) {
		return
	}
	now := t.now(ns)
	r.mu.Lock()
	if !r.done.Load() {
		r.touched = max(r.touched, now)
	}
	r.mu.Unlock()
}

// Detokenized records a delivery of newTokens tokens towards the client;
// busy is the time spent detokenizing, if known.
func (q *Request) Detokenized(at time.Time, newTokens int, busy time.Duration) error {
	if q == nil {
		return errNilRequest // replaces the nil check reading q.t implies
	}
	// The per-token fast path: what check and apply would do for a valid
	// delivery, without building an Update. Anything unusual takes the
	// general path, which rejects it with the precise reason.
	if t, r := q.t, q.r; r != nil && uint(newTokens) <= maxNewTokensStep && uint64(busy) <= uint64(maxBusy) && !t.closed.Load() {
		if ns := t.ns(at); t.inBound(ns) {
			now := t.now(ns)
			r.mu.Lock()
			if !r.done.Load() && allowed[SideFrontend][KindDetokenized]&(1<<r.fe.last) != 0 && ns >= r.fe.time && !r.waitOver(now) {
				r.fe.last, r.fe.time = KindDetokenized, ns
				r.touched = max(r.touched, now)
				t.saw(SideFrontend, now)
				r.feReported = true
				t.delivered(r, newTokens, busy, ns)
				r.mu.Unlock()
				t.after(ns)
				return nil
			}
			r.mu.Unlock()
		}
	}
	return q.Record(Update{Kind: KindDetokenized, Time: at, NumNewTokens: newTokens, Busy: busy})
}

// Finish records the frontend's FINISHED with reason (stop, length, …).
func (q *Request) Finish(at time.Time, reason string) error {
	return q.Record(Update{Kind: KindFinished, Time: at, FinishReason: reason})
}

// Abort records FINISHED with reason "abort" (client disconnect, cancel).
func (q *Request) Abort(at time.Time) error { return q.Finish(at, FinishAbort) }

// Fail records FINISHED with reason "error" and the given error.type.
func (q *Request) Fail(at time.Time, errorType string) error {
	return q.Record(Update{Kind: KindFinished, Time: at, FinishReason: FinishError, ErrorType: errorType})
}

// Record records any frontend update for this request; u's RequestID, Scope
// and Model are ignored. A FINISHED with Side SideEngine is accepted too, for
// engines that drive a request through its handle.
func (q *Request) Record(u Update) error {
	if q == nil {
		return errNilRequest
	}
	t, r := q.t, q.r
	if r == nil {
		if t == nil {
			return errNilRequest
		}
		return t.rejected(reject(&u, u.Side, ReasonUnknownRequest, "the request's arrival was rejected"))
	}
	if err := t.recordReq(r, &u); err != nil {
		return err
	}
	t.after(t.ns(u.Time))
	return nil
}

// recordReq records u for r, found by handle rather than by id. u's
// RequestID, Scope and Model are set from r.
func (t *Tracker) recordReq(r *reqState, u *Update) error {
	u.RequestID, u.Scope, u.Model = r.id, r.scope, r.model
	if u.Kind == KindArrived {
		return t.rejected(reject(u, SideFrontend, ReasonDuplicateArrival, "the handle's request has arrived already"))
	}
	if t.closed.Load() {
		return t.rejected(reject(u, u.Side, ReasonClosed, "the tracker is shut down"))
	}
	ns := t.ns(u.Time)
	t.capNames(u)
	side, rerr := check(u)
	if rerr == nil {
		rerr = t.aheadReject(u, side, ns)
	}
	if rerr != nil {
		return t.rejected(rerr)
	}
	complete, ended, rerr := t.applyTo(r, u, side, ns, false)
	if ended {
		return t.rejected(reject(u, side, ReasonAfterFinished, "the request has finished"))
	}
	if complete {
		t.retire(r)
	}
	if rerr != nil {
		return t.rejected(rerr)
	}
	return nil
}

// retire unlinks a request its caller ended and finalizes it.
func (t *Tracker) retire(r *reqState) {
	r.sh.mu.Lock()
	r.sh.unlink(r)
	r.sh.mu.Unlock()
	t.finalize(r, "")
}

// RoutedPD records what a router or proxy that routes the request through
// disaggregated serving itself (SPEC §7) sees: when it sent the request to
// the prefill instance, when P's response came back, and when it sent the
// request on to the decode instance. The root then carries
// llm.pd.prefill_duration_s (P's response − send to P) and
// llm.pd.decode_ttft_s (the first content token − send to D), beside the
// client's TTFT, so the "two TTFT numbers" of P/D are explained on one
// span. Call it before the request finishes.
func (q *Request) RoutedPD(prefillSent, prefillResponded, decodeSent time.Time) error {
	if q == nil {
		return errNilRequest
	}
	t, r := q.t, q.r
	u := Update{Kind: KindInputProcessed, Side: SideFrontend, Time: prefillSent}
	if r == nil {
		if t == nil {
			return errNilRequest
		}
		return t.rejected(reject(&u, SideFrontend, ReasonUnknownRequest, "RoutedPD: the request's arrival was rejected"))
	}
	u.RequestID = r.id
	ps, pr, ds := t.ns(prefillSent), t.ns(prefillResponded), t.ns(decodeSent)
	if !validNs(ps) || !validNs(pr) || !validNs(ds) || pr < ps {
		return t.rejected(reject(&u, SideFrontend, ReasonBadTimestamp, "RoutedPD: times out of range or the response before the send"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return t.rejected(reject(&u, SideFrontend, ReasonAfterFinished, "RoutedPD: the request has finished"))
	}
	r.ext().route = pdRoute{prefillSent: ps, prefillDone: pr, decodeSent: ds}
	return nil
}

// pdRoute is what RoutedPD recorded.
type pdRoute struct {
	prefillSent, prefillDone, decodeSent int64
}
