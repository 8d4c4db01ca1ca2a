package otelhttpmw

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/otelstats"
)

// DefaultPeekLimit is how much of a request body the middleware reads
// ahead, and how much of a non-stream response or of one SSE event it
// reads: 1 MiB.
const DefaultPeekLimit = 1 << 20

// Operations of the default routes.
const (
	OperationChat           = "chat"
	OperationTextCompletion = "text_completion"
)

// DefaultRoutes are the paths traced by default and their GenAI operation
// names. The Responses API is "chat": a conversation in, a message out.
var DefaultRoutes = map[string]string{
	"/v1/chat/completions": OperationChat,
	"/v1/completions":      OperationTextCompletion,
	"/v1/responses":        OperationChat,
}

// ErrTooLate is returned by InputProcessed once the middleware has recorded
// output or decided input processing without the handler.
var ErrTooLate = errors.New("otelhttpmw: input processing reported after output began")

// ErrNotTraced is returned by InputProcessed for a request the middleware
// does not trace.
var ErrNotTraced = errors.New("otelhttpmw: request is not traced")

// Option configures the middleware, in the style of otelhttp.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	routes    map[string]string
	limit     int
	prop      propagation.TextMapPropagator
	trust     func(*http.Request) bool
	public    func(*http.Request) bool
	requestID func(*http.Request) string
	scope     func(*http.Request) string
}

// WithRoute traces POST requests to path as operation (adding to or
// replacing DefaultRoutes); an empty operation stops tracing path.
func WithRoute(path, operation string) Option {
	return optionFunc(func(c *config) {
		if operation == "" {
			delete(c.routes, path)
		} else {
			c.routes[path] = operation
		}
	})
}

// WithPeekLimit sets how many bytes of a request body are read ahead, and
// how much of a non-stream response or of one SSE event is read (default
// DefaultPeekLimit). A body over the limit still reaches the handler intact;
// the middleware then knows only the fields within the limit, and without a
// model it does not trace the request.
func WithPeekLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.limit = n
		}
	})
}

// WithPropagators sets how the incoming trace context is read; the default
// is the W3C Trace Context propagator (traceparent, tracestate).
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// DetailHeader asks for a request's detail level (0–3, see otelstats.Detail).
// It is honoured only for trusted callers (WithTrustIncomingSampling).
const DetailHeader = "X-Llmtrace-Detail"

// WithTrustIncomingSampling says whether every caller's traceparent sampled
// flag is passed on as sent (see the package doc, "Incoming trace context").
// The default trusts no caller.
func WithTrustIncomingSampling(trust bool) Option {
	return WithTrustIncomingSamplingFunc(func(*http.Request) bool { return trust })
}

// WithTrustIncomingSamplingFunc decides per request whether the caller's
// sampled flag is passed on as sent: e.g. by client certificate, by source
// network, by an authenticated internal header.
func WithTrustIncomingSamplingFunc(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.trust = f })
}

// WithPublicEndpointFunc marks requests whose incoming trace context is
// ignored altogether: their root span starts a new trace, so an untrusted
// caller cannot put our spans into a trace of its choosing. Trusted
// requests (WithTrustIncomingSampling) keep their parent.
func WithPublicEndpointFunc(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.public = f })
}

// WithRequestID sets the request id of each traced request (the
// gen_ai.request.id attribute and the id engine updates use); the default
// is otelstats.NewRequestID. An id already in flight makes the tracker
// reject the arrival, and that request goes untraced.
func WithRequestID(f func(*http.Request) string) Option {
	return optionFunc(func(c *config) { c.requestID = f })
}

// WithScope sets each request's scope (a tenant, an engine instance; see
// "Request ids" in otelstats).
func WithScope(f func(*http.Request) string) Option {
	return optionFunc(func(c *config) { c.scope = f })
}

// NewHandler wraps next so that each OpenAI-compatible inference request it
// serves becomes a request in t: a trace and the serving metrics. See the
// package doc.
func NewHandler(next http.Handler, t *otelstats.Tracker, opts ...Option) http.Handler {
	c := config{routes: make(map[string]string, len(DefaultRoutes)), limit: DefaultPeekLimit, prop: propagation.TraceContext{}}
	for p, op := range DefaultRoutes {
		c.routes[p] = op
	}
	for _, o := range opts {
		o.apply(&c)
	}
	return &handler{next: next, t: t, cfg: c}
}

// NewMiddleware returns NewHandler as a middleware function.
func NewMiddleware(t *otelstats.Tracker, opts ...Option) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler { return NewHandler(next, t, opts...) }
}

type handler struct {
	next http.Handler
	t    *otelstats.Tracker
	cfg  config
}

type traceKey struct{}

// InputProcessed tells the middleware that the handler has processed the
// request's input (templated and tokenized its prompt) at at, into
// promptTokens tokens. It records INPUT_PROCESSED with the sampling
// parameters read from the body — exact where the middleware would
// otherwise wait for the response's usage — and must come before the
// handler writes output. at zero means now.
func InputProcessed(ctx context.Context, at time.Time, promptTokens int) error {
	st, _ := ctx.Value(traceKey{}).(*reqTrace)
	if st == nil {
		return ErrNotTraced
	}
	if at.IsZero() {
		at = time.Now()
	}
	return st.handlerInput(at, promptTokens)
}

func (h *handler) operation(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return "", false
	}
	p := r.URL.Path
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	op, ok := h.cfg.routes[p]
	return op, ok
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := h.operation(r)
	if !ok {
		h.next.ServeHTTP(w, r) // health, metrics, anything else: untouched
		return
	}
	arrived := time.Now()
	prefix, _, body := peek(r.Body, h.cfg.limit, r.ContentLength)
	ri := parseOpenAIBody(prefix)
	parsedAt := time.Now()

	var q *otelstats.Request
	var pctx context.Context
	if ri.Model != "" {
		pctx = h.parentContext(r)
		id := ""
		if h.cfg.requestID != nil {
			id = h.cfg.requestID(r)
		}
		if id == "" {
			id = otelstats.NewRequestID()
		}
		scope := ""
		if h.cfg.scope != nil {
			scope = h.cfg.scope(r)
		}
		a := otelstats.Arrival{Time: arrived, Model: ri.Model, Operation: op, Scope: scope}
		if h.cfg.trust != nil && h.cfg.trust(r) {
			// A trusted caller's sampled flag decides, and it may ask for
			// a detail level (SPEC §6: never an untrusted one).
			a.TrustParent = true
			if v := r.Header.Get(DetailHeader); v != "" {
				if d, err := otelstats.ParseDetail(v); err == nil {
					a.Detail = d
				}
			}
		}
		var err error
		q, err = h.t.Arrive(pctx, id, a)
		if err != nil {
			q = nil
		}
	}
	if q == nil {
		// Not traceable (no model, a rejected arrival): the handler gets
		// the request as it came.
		r2 := r.WithContext(r.Context())
		r2.Body = body
		h.next.ServeHTTP(w, r2)
		return
	}

	reqCtx := r.Context()
	// The Responses API always ends its stream with the usage.
	expectUsage := ri.Stream && (ri.IncludeUsage || strings.HasSuffix(r.URL.Path, "/responses"))
	st := newReqTrace(q, &ri, expectUsage, parsedAt, reqCtx, h.cfg.limit)
	if h.t.CapturesContent() {
		st.capture, st.input = true, captureInput(prefix)
	}
	hctx := context.WithValue(otelstats.ContextWithRequest(q.Context(pctx), q), traceKey{}, st)
	r2 := r.WithContext(hctx)
	r2.Body = body
	rw := &respWriter{ResponseWriter: w, st: st}

	// The time the client went away, if it does while the handler runs.
	var gone atomic.Pointer[time.Time]
	goneDone := make(chan struct{})
	stop := context.AfterFunc(reqCtx, func() {
		now := time.Now()
		gone.Store(&now)
		close(goneDone)
	})
	normal := false
	defer func() {
		end := time.Now()
		if !stop() {
			<-goneDone
		}
		o := outcome{end: end, panicked: !normal}
		if g := gone.Load(); g != nil {
			o.disconnected = *g
		}
		st.finish(o)
	}()
	h.next.ServeHTTP(rw, r2)
	normal = true
}

// parentContext returns r's context with the incoming trace context
// applied per the trust configuration.
func (h *handler) parentContext(r *http.Request) context.Context {
	base := r.Context()
	ctx := h.cfg.prop.Extract(base, propagation.HeaderCarrier(r.Header))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.Equal(trace.SpanContextFromContext(base)) {
		return ctx // no incoming trace context: a span of ours, if any, is the parent
	}
	if h.cfg.trust != nil && h.cfg.trust(r) {
		return ctx
	}
	if h.cfg.public != nil && h.cfg.public(r) {
		return trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(base))
	}
	// Untrusted: keep the caller's trace and parent ids, so our spans join
	// its trace, but set the sampled flag whatever the caller sent, so that
	// its flag decides nothing (see the package doc).
	return trace.ContextWithRemoteSpanContext(ctx, sc.WithTraceFlags(sc.TraceFlags().WithSampled(true)))
}
