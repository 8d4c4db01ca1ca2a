package openaihttp

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// ErrTooLate is returned by InputProcessed once the layer has recorded
// output or decided input processing without the handler.
var ErrTooLate = errors.New("openaihttp: input processing reported after output began")

// ErrNotTraced is returned by InputProcessed for a request the layer does
// not trace.
var ErrNotTraced = errors.New("openaihttp: request is not traced")

// Handler is the middleware NewHandler returns.
type Handler struct {
	next http.Handler
	t    *otelstats.Tracker
	cfg  *config
}

var _ http.Handler = (*Handler)(nil)

// NewHandler wraps next so that each OpenAI-compatible inference request it
// serves becomes a request in t: a trace and the serving metrics (see the
// package doc). t should be live (otelstats.WithAutoSweep). Options that
// cannot be honoured (a meter refusing an instrument) make it panic, as a
// misconfiguration at start-up; NewMiddleware is the same.
func NewHandler(next http.Handler, t *otelstats.Tracker, opts ...Option) *Handler {
	cfg, err := newConfig(opts)
	if err != nil {
		panic("openaihttp: " + err.Error())
	}
	return &Handler{next: next, t: t, cfg: cfg}
}

// NewMiddleware returns NewHandler as a middleware function.
func NewMiddleware(t *otelstats.Tracker, opts ...Option) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return NewHandler(next, t, opts...) }
}

type exKey struct{}

// InputProcessed tells the layer that the handler has processed the
// request's input (templated and tokenized its prompt) at at, into
// promptTokens tokens. It records INPUT_PROCESSED with the sampling
// parameters read from the body — exact where the layer would otherwise
// wait for the response's usage — and must come before the handler writes
// output. at zero means now.
func InputProcessed(ctx context.Context, at time.Time, promptTokens int) error {
	ex, _ := ctx.Value(exKey{}).(*exchange)
	if ex == nil {
		return ErrNotTraced
	}
	if at.IsZero() {
		at = time.Now()
	}
	return ex.handlerInput(at, promptTokens)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, op, ok := h.cfg.route(r.Method, r.URL.Path)
	if !ok {
		h.next.ServeHTTP(w, r) // health, metrics, anything else: untouched
		return
	}
	arrived := time.Now()
	ex := newExchange(h.cfg, op, arrived)
	capture := h.t.CapturesContent()
	fields := requestFields
	if capture {
		fields = requestFieldsCapture
	}
	sc := newFieldScanner(fields, ex.hold)
	body, eof := h.cfg.readAhead(r.Body, sc, ex.hold)
	ri := requestInfoOf(sc)
	model, problem := modelOf(sc, &ri, eof)
	parsedAt := time.Now()
	in := h.cfg.incoming(r)
	q, err := h.t.Arrive(in.ctx, h.cfg.newRequestID(r), h.cfg.arrival(r, &in, onArrival{time: arrived, model: model, op: op}))
	if err != nil {
		// A rejected arrival (a duplicate id, the tracker shut down): the
		// handler gets the request as it came.
		sc.release()
		ex.hold.close()
		r2 := r.WithContext(r.Context())
		r2.Body = body
		h.next.ServeHTTP(w, r2)
		return
	}
	h.cfg.noteBody(q, r, route, &ri, problem)
	ex.begin(q, ri, parsedAt, isResponsesAPI(route), capture)
	if capture {
		ex.input, ex.inputCut = captureInputOf(sc)
	}
	sc.release()

	hctx := context.WithValue(otelstats.ContextWithRequest(q.Context(in.ctx), q), exKey{}, ex)
	r2 := r.WithContext(hctx)
	r2.Body = body
	rw := &respWriter{ResponseWriter: w, ex: ex}
	ex.gone.watch(r.Context())
	normal := false
	defer func() {
		o := outcome{end: time.Now(), panicked: !normal, gone: ex.gone.done()}
		var metrics func(otelstats.Update)
		if h.cfg.httpMetrics {
			metrics = func(u otelstats.Update) {
				h.cfg.inst.recordServer(r, route, ex.status, httpErrorType(ex.status, u.ErrorType), o.end.Sub(arrived))
			}
		}
		ex.finish(o, metrics)
		ex.setTrailer(w.Header())
	}()
	h.next.ServeHTTP(rw, r2)
	normal = true
}

// noteBody puts the server side's HTTP attributes on the request's root,
// with why the body named no model, and counts the client strings the
// layer dropped.
func (c *config) noteBody(q *otelstats.Request, r *http.Request, route string, ri *requestInfo, problem string) {
	if problem == BodyModelTooLong {
		c.countTruncated(attributes.RequestModel)
	}
	if ri.StopOver {
		c.countTruncated(attributes.RequestStopSequences)
	}
	if !q.SpanContext().IsSampled() {
		return // the head sampler dropped the trace: no root to note them on
	}
	attrs := c.serverAttrs(r, route)
	if problem != "" {
		attrs = append(attrs, attributes.HTTPRequestBody.String(problem))
	}
	_ = q.SetAttributes(attrs...)
}

// goneWatch notes when a request's context ends (the client went away)
// while it is served. The zero value is ready for watch; one goroutine
// calls watch, then done.
type goneWatch struct {
	ctx   context.Context
	stop  func() bool
	wg    sync.WaitGroup
	at    time.Time   // set by fire, read after wg or fired
	fired atomic.Bool // at is set
}

func (g *goneWatch) watch(ctx context.Context) {
	g.ctx = ctx
	g.wg.Add(1)
	g.stop = context.AfterFunc(ctx, g.fire)
}

func (g *goneWatch) fire() {
	g.at = time.Now()
	g.fired.Store(true)
	g.wg.Done()
}

// endedBefore reports whether the context is known to have ended before
// t, while it is watched (any goroutine). A context that has ended whose
// func has not run yet ended a moment ago: not before a write that is
// being read now.
func (g *goneWatch) endedBefore(t time.Time) bool {
	return g.fired.Load() && g.at.Before(t)
}

// done stops watching and returns when the context ended, or zero.
func (g *goneWatch) done() time.Time {
	if g.stop() {
		g.wg.Done() // stopped before it ran: fire never will
	}
	g.wg.Wait()
	switch {
	case !g.at.IsZero():
		return g.at
	case g.ctx.Err() != nil:
		// A context closes its Done channel before it runs its
		// AfterFuncs: a handler that returned on Done can stop the
		// func before it ran. The client has gone all the same.
		return time.Now()
	}
	return time.Time{}
}
