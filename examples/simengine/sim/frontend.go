package sim

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/llmtrace/llmtrace/otelstats"
)

// The frontend of an instance (vLLM's API server): arrival, tokenization,
// the hop to the engine core, and the delivery of tokens — to the client,
// or in P/D back to the router.

func (in *instance) arrive(r *request) {
	s := in.s
	at := vt(s.now)
	ctx := s.ctx
	if r.traceparent != "" {
		// The router's trace context, as an HTTP server extracts it.
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": r.traceparent})
	}
	h, err := in.tr.Arrive(ctx, r.id, otelstats.Arrival{Time: at, Model: s.cfg.Model, Operation: s.cfg.Operation,
		PDRole: in.role, LoRAAdapter: r.adapter})
	s.reject(err)
	r.handle = h
	r.truth.ID, r.truth.Arrival = r.id, at
	f := s.cfg.Frontend
	s.push(event{at: s.now + int64(f.InputBase) + int64(r.prompt)*int64(f.InputPerToken), kind: evInputDone, req: r.idx, inst: in.idx})
}

func (in *instance) inputDone(r *request) {
	s := in.s
	at := vt(s.now)
	sp := s.sampling
	if in.role == otelstats.PDRolePrefill {
		sp = s.prefillSampling
	}
	s.reject(r.handle.InputProcessed(at, r.prompt, sp))
	r.truth.InputProcessed = at
	if r.prompt >= s.cfg.MaxModelLen {
		// vLLM's OpenAI server answers 400: the prompt does not fit the
		// context window. The engine never sees the request.
		s.reject(r.handle.Fail(at, ErrContextLenExceeded))
		r.state, r.feDone = stDone, true
		r.truth.Finish = at
		r.truth.FinishReason, r.truth.ErrorType = otelstats.FinishError, ErrContextLenExceeded
		in.frontendDone(r, true)
		return
	}
	s.push(event{at: s.now + int64(s.cfg.Frontend.ToEngine), kind: evAtEngine, req: r.idx, inst: in.idx})
}

// deliver hands n tokens of r to the client (or the router).
func (in *instance) deliver(r *request, n int, last bool) {
	if r.feDone {
		return // the client is gone; tokens still in flight are dropped
	}
	s := in.s
	at := vt(s.now)
	s.reject(r.handle.Detokenized(at, n, s.cfg.Frontend.DetokenizeBusy))
	r.delivered += n
	if r.truth.FirstToken.IsZero() {
		r.truth.FirstToken = at
	}
	if in.role == otelstats.PDRoleDecode {
		s.push(event{at: s.now + int64(s.cfg.PD.Hop), kind: evRouterTokens, req: r.route, n: int32(n), last: last})
	}
	switch {
	case last:
		s.reject(r.handle.Finish(at, r.reason))
		r.truth.FinishReason = r.reason
	case r.abortAt > 0 && r.delivered >= r.abortAt:
		// The client disconnects: the frontend ends the request and sends
		// the abort to the engine core.
		in.abortRequest(r)
		return
	default:
		return
	}
	r.feDone = true
	r.truth.Finish = at
	r.truth.OutputTokens = r.delivered
	in.frontendDone(r, false)
}

// abortRequest is the frontend ending r for a client that went away.
func (in *instance) abortRequest(r *request) {
	s := in.s
	at := vt(s.now)
	s.reject(r.handle.Abort(at))
	r.truth.FinishReason, r.truth.ErrorType = ReasonAbort, ReasonAbort
	r.feDone = true
	r.truth.Finish = at
	r.truth.OutputTokens = r.delivered
	s.push(event{at: s.now + int64(s.cfg.Frontend.ToEngine), kind: evAbortAtEngine, req: r.idx, inst: in.idx})
	in.frontendDone(r, false)
}

// abortFrontend is the router's abort reaching a decode instance.
func (in *instance) abortFrontend(r *request) {
	if r.feDone {
		return // it finished before the abort arrived
	}
	in.abortRequest(r)
}

// frontendDone is the frontend finishing r: the client is done with a
// unified instance's request; a prefill instance answers the router.
func (in *instance) frontendDone(r *request, failed bool) {
	s := in.s
	switch in.role {
	case "":
		s.clientDone()
	case otelstats.PDRolePrefill:
		ev := event{at: s.now + int64(s.cfg.PD.Hop), kind: evRouterPrefill, req: r.route}
		if failed {
			ev.n = 1
		}
		s.push(ev)
	}
}
