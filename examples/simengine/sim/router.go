package sim

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/llmtrace/llmtrace/otelstats"
)

// router is a P/D router (llm-d's sidecar, vLLM's disaggregated proxy): it
// receives the client's request, sends it to the prefill instance with
// max_tokens 1, and on P's response sends it to the decode instance, whose
// tokens it streams to the client. It records the client's view in its own
// tracker — arrival, the tokens as the client gets them, the finish — and
// the two P/D timings (Request.RoutedPD), and passes its trace context to
// both instances as a traceparent, so their request trees join its trace.
type router struct {
	tr     *otelstats.Tracker
	p, d   *instance
	prop   propagation.TextMapPropagator
	routes []route
	truths []Truth
}

type route struct {
	id                 string
	handle             *otelstats.Request
	prompt, maxOut     int
	reason, adapter    string
	abortAt, delivered int
	done               bool
	truth              *Truth
	prefillSent        int64
}

func (rt *router) traceparent(s *sim, h *otelstats.Request) string {
	c := propagation.MapCarrier{}
	rt.prop.Inject(h.Context(s.ctx), c)
	return c["traceparent"]
}

// arrive is the client's request reaching the router, which sends it on to
// the prefill instance at once.
func (rt *router) arrive(s *sim, i int32) {
	x := &rt.routes[i]
	at := vt(s.now)
	h, err := rt.tr.Arrive(s.ctx, x.id, otelstats.Arrival{Time: at, Model: s.cfg.Model, Operation: s.cfg.Operation, LoRAAdapter: x.adapter})
	s.reject(err)
	x.handle = h
	*x.truth = Truth{ID: x.id, Arrival: at, PromptTokens: x.prompt, Adapter: x.adapter, PrefillSent: at}
	x.prefillSent = s.now
	rt.p.reqs[i].traceparent = rt.traceparent(s, h)
	s.push(event{at: s.now + int64(s.cfg.PD.Hop), kind: evArrive, req: i, inst: rt.p.idx})
}

// prefillDone is P's response reaching the router: the request goes on to
// the decode instance, or, when P rejected it, the client gets the error.
func (rt *router) prefillDone(s *sim, i int32, failed bool) {
	x := &rt.routes[i]
	at := vt(s.now)
	if failed {
		s.reject(x.handle.Fail(at, ErrContextLenExceeded))
		rt.finish(s, x, otelstats.FinishError, ErrContextLenExceeded, true)
		return
	}
	x.truth.PrefillResponded, x.truth.DecodeSent = at, at
	s.reject(x.handle.RoutedPD(vt(x.prefillSent), at, at))
	rt.d.reqs[i].traceparent = rt.traceparent(s, x.handle)
	s.push(event{at: s.now + int64(s.cfg.PD.Hop), kind: evArrive, req: i, inst: rt.d.idx})
}

// tokens are n of D's tokens reaching the router, which streams them to
// the client; the client may disconnect, and the router aborts D.
func (rt *router) tokens(s *sim, i int32, n int, last bool) {
	x := &rt.routes[i]
	if x.done {
		return // the client is gone
	}
	at := vt(s.now)
	s.reject(x.handle.Detokenized(at, n, 0))
	x.delivered += n
	if x.truth.FirstToken.IsZero() {
		x.truth.FirstToken = at
	}
	switch {
	case last:
		// The response's usage tells the router the prompt's size.
		s.reject(x.handle.Record(otelstats.Update{Kind: otelstats.KindFinished, Time: at, FinishReason: x.reason, NumPromptTokens: x.prompt}))
		rt.finish(s, x, x.reason, "", false)
	case x.abortAt > 0 && x.delivered >= x.abortAt:
		s.reject(x.handle.Abort(at))
		rt.finish(s, x, ReasonAbort, ReasonAbort, true)
		s.push(event{at: s.now + int64(s.cfg.PD.Hop), kind: evAbortFrontend, req: i, inst: rt.d.idx})
	}
}

func (rt *router) finish(s *sim, x *route, reason, errType string, noUsage bool) {
	x.done = true
	t := x.truth
	t.Finish, t.FinishReason, t.ErrorType = vt(s.now), reason, errType
	t.OutputTokens, t.NoPromptCount = x.delivered, noUsage
	s.clientDone()
}

// release is the decode instance telling the prefill instance it has read
// request i's KV cache (or no longer needs it): P frees the blocks, which
// may let its queue move.
func (rt *router) release(s *sim, i int32) error {
	p := rt.p
	r := &p.reqs[i]
	if r.state != stHeld {
		return nil
	}
	p.kv.free(r)
	r.state = stDone
	p.held--
	return p.wake()
}
