package openaihttp

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

// Defaults of the bounds on what the layer reads and holds.
const (
	// DefaultPeekLimit is how much of a request body the middleware reads
	// before calling the handler, to learn the model and the sampling
	// parameters.
	DefaultPeekLimit = 64 << 10
	// DefaultMaxBody is how far the middleware reads ahead when the model
	// is not within the peek limit (the OpenAI SDKs write it after the
	// messages). The proxy holds none of a body: it reads the fields as
	// the body streams upstream.
	DefaultMaxBody = 16 << 20
	// DefaultEventLimit bounds one SSE event, and the choices of a
	// response that is not streamed, that the layer reads; longer ones
	// pass through unread.
	DefaultEventLimit = 1 << 20
	// DefaultBodyBudget bounds the bytes of bodies one Handler or Proxy
	// holds at once, over all its requests.
	DefaultBodyBudget = 64 << 20
)

// Option configures NewHandler, NewMiddleware and NewProxy, in the style
// of otelhttp. An option that concerns only the proxy says so and is
// ignored by the middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	routes     map[string]string
	peekLimit  int
	maxBody    int
	eventLimit int
	budgetSize int64
	prop       propagation.TextMapPropagator
	// propFields are the headers prop writes, canonical, with B3's
	// X-B3-ParentSpanId, which it does not list: the proxy clears them
	// all before it writes the upstream's (built by newConfig, once: a
	// composite propagator's Fields allocates).
	propFields []string
	trust      func(*http.Request) bool
	public     func(*http.Request) bool
	requestID  func(*http.Request) string
	scope      func(*http.Request) string

	serverTiming bool
	httpMetrics  bool
	// closing: the server is cutting the requests still running
	// (Proxy.Closing); they end as unfinished, not as clients' aborts.
	closing atomic.Bool
	tp      trace.TracerProvider
	mp      metric.MeterProvider

	// Proxy only.
	sp        sdktrace.SpanProcessor
	res       *resource.Resource
	src       *spans.Source // of the spans handed to sp
	transport http.RoundTripper
	stall     StallPolicy
	logger    *slog.Logger

	// Built by newConfig.
	budget         *budget
	responseFields *fieldSet
	// responseFieldsCapture adds the Responses API's output (content
	// capture only).
	responseFieldsCapture *fieldSet
	tracer                trace.Tracer
	inst                  *instruments
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		routes:    make(map[string]string, len(DefaultRoutes)),
		peekLimit: DefaultPeekLimit, maxBody: DefaultMaxBody, eventLimit: DefaultEventLimit, budgetSize: DefaultBodyBudget,
		prop: propagation.TraceContext{}, httpMetrics: true,
	}
	for p, op := range DefaultRoutes {
		c.routes[p] = op
	}
	for _, o := range opts {
		o.apply(c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.stall = c.stall.withDefaults()
	c.propFields = injectedHeaders(c.prop)
	c.maxBody = max(c.maxBody, c.peekLimit)
	c.responseFields = newResponseFields(c.eventLimit)
	c.responseFieldsCapture = withOutput(c.responseFields)
	c.tracer = c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version()))
	if c.sp != nil {
		if c.res == nil {
			c.res = resource.Default()
		}
		c.src = &spans.Source{Resource: c.res, Scope: instrumentation.Scope{Name: ScopeName, Version: Version()}}
	}
	var err error
	if c.inst, err = newInstruments(c.mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))); err != nil {
		return nil, err
	}
	c.budget = newBudget(c.budgetSize, func() { c.inst.budgetRefused.Add(context.Background(), 1) })
	return c, nil
}

// countTruncated counts a value of key the layer cut at its cap.
func (c *config) countTruncated(key attribute.Key) {
	c.inst.truncated.Add(context.Background(), 1, metric.WithAttributes(attributes.TruncatedKey.String(string(key))))
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

// WithPeekLimit sets how many bytes of a request body the middleware reads
// before it calls the handler (default DefaultPeekLimit). The handler
// still reads the body whole and byte-identical.
func WithPeekLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.peekLimit = n
		}
	})
}

// WithMaxBody sets how far the middleware reads a body ahead when the
// model is not within the peek limit (default DefaultMaxBody). Past it, or
// past the budget, the request is traced as UnknownModel.
func WithMaxBody(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxBody = n
		}
	})
}

// WithEventLimit bounds one SSE event, and the choices of a response that
// is not streamed, that the layer reads (default DefaultEventLimit); of
// longer choices only the finish reasons are read.
func WithEventLimit(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.eventLimit = n
		}
	})
}

// WithBodyBudget bounds the bytes of bodies the Handler or Proxy holds at
// once over all its requests (default DefaultBodyBudget). What would pass
// it is not read (a model beyond the peek limit, an event, a response's
// fields) and counted in llm.http.body_budget.refused; requests are never
// delayed or failed by it.
func WithBodyBudget(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.budgetSize = n
		}
	})
}

// WithPropagators sets how the incoming trace context is read (and, in the
// proxy, written upstream); the default is W3C Trace Context.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// WithTrustIncomingSampling says whether every caller's traceparent sampled
// flag is passed on as sent (see the package doc, "Incoming trace
// context"). The default trusts no caller.
func WithTrustIncomingSampling(trust bool) Option {
	return WithTrustIncomingSamplingFunc(func(*http.Request) bool { return trust })
}

// WithTrustIncomingSamplingFunc decides per request whether the caller's
// sampled flag is passed on as sent: by client certificate, source
// network, an authenticated internal header.
func WithTrustIncomingSamplingFunc(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.trust = f })
}

// WithPublicEndpoint marks every request as coming from the public: an
// incoming trace context is not joined; the root starts a new trace and
// links to the caller's span. Trusted requests keep their parent. The
// proxy does not pass on an untrusted caller's X-Forwarded-* either: upstream,
// X-Forwarded-For starts at the caller's address, and X-Forwarded-Host
// and -Proto are the proxy's own (without it, the client's address is
// appended to the incoming X-Forwarded-For and the incoming host and
// scheme go on, as behind a load balancer).
func WithPublicEndpoint() Option {
	return WithPublicEndpointFunc(func(*http.Request) bool { return true })
}

// WithPublicEndpointFunc is WithPublicEndpoint per request.
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

// WithServerTiming adds a Server-Timing header to responses that are not
// streamed, and a Server-Timing trailer to streams, with the request's
// queue, ttft, prefill, decode and e2e times as the tracker knows them and
// its traceparent (see the package doc). Off by default: it tells the
// caller the trace id.
func WithServerTiming(on bool) Option {
	return optionFunc(func(c *config) { c.serverTiming = on })
}

// WithHTTPMetrics turns the HTTP conventions' http.server.request.duration
// (and the proxy's http.client.request.duration) on or off (default on):
// off when otelhttp already wraps the handler.
func WithHTTPMetrics(on bool) Option {
	return optionFunc(func(c *config) { c.httpMetrics = on })
}

// WithTracerProvider sets the provider of the layer's own spans (the
// proxy's upstream call and stream spans); the default is the global one.
// Give the Tracker the same one, built WithIDGenerator(spans.IDGenerator()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithSpanProcessor hands the proxy's own spans (the upstream call, the
// wait for the first token, the stream) straight to sp as finished spans
// — the processor the tracker was given with otelstats.WithSpanProcessor,
// typically the TracerProvider's batch processor — instead of starting
// and ending them through the Tracer: they are all known when the request
// has ended, and the Tracer's live spans cost about 40 allocations a
// request more. As with the tracker, the TracerProvider's sampler is not
// consulted (the tracker's sampling has decided) and the spans report the
// resource WithResource sets. Proxy only; with sp nil (the default) the
// spans go through WithTracerProvider's Tracer.
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return optionFunc(func(c *config) { c.sp = sp })
}

// WithResource sets the resource of the spans WithSpanProcessor hands
// over — give the TracerProvider's (default: resource.Default()). Proxy
// only.
func WithResource(res *resource.Resource) Option {
	return optionFunc(func(c *config) { c.res = res })
}

// WithMeterProvider sets the provider of the layer's own metrics; the
// default is the global one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithTransport sets how the proxy reaches its upstream (default:
// NewTransport(TransportConfig{})). Proxy only.
func WithTransport(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) { c.transport = rt })
}

// WithStallPolicy sets when a gap in a stream is a stall. Proxy only.
func WithStallPolicy(p StallPolicy) Option {
	return optionFunc(func(c *config) { c.stall = p })
}

// WithLogger gets the proxy's upstream failures; none by default. Proxy
// only.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// The proxy's transport defaults (NewTransport).
const (
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 10 * time.Minute
	DefaultIdleConnTimeout       = 90 * time.Second
	DefaultMaxIdleConnsPerHost   = 256
)
