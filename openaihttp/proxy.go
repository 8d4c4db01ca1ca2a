package openaihttp

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// Error types of the proxy's upstream failures, and of responses that end
// badly (error.type on the root, FINISHED's ErrorType).
const (
	ErrorConnectionRefused = "connection_refused" // nobody listens upstream (502 to the client)
	ErrorTimeout           = "timeout"            // dial or response headers too slow (504)
	ErrorUpstream          = "upstream_error"     // any other failure before or while it answered
	ErrorStream            = "stream_error"       // an error event in the stream
	ErrorResponseFailed    = "response_failed"    // a failed Responses API response
	ErrorTruncated         = "response_truncated" // a stream that ended before it was complete, a JSON body cut short
	ErrorPanic             = "panic"              // the handler panicked (middleware)
)

// Proxy is a tracing reverse proxy to one OpenAI-compatible server: an
// http.Handler to mount in a mux of your own (see the package doc, "The
// proxy"). Create it with NewProxy. Safe for concurrent use.
type Proxy struct {
	up        *url.URL
	host      string
	port      int
	t         *otelstats.Tracker
	cfg       *config
	rp        *httputil.ReverseProxy
	transport http.RoundTripper

	mu   sync.Mutex
	urls map[string]string // urlFull's
}

var _ http.Handler = (*Proxy)(nil)

// NewProxy returns a proxy to upstream (its base URL, e.g.
// http://127.0.0.1:8000 or http://host:11434/v1) recording into t, which
// should be live (otelstats.WithAutoSweep) and built with the same
// TracerProvider as WithTracerProvider gives, with
// sdktrace.WithIDGenerator(spans.IDGenerator()).
func NewProxy(upstream *url.URL, t *otelstats.Tracker, opts ...Option) (*Proxy, error) {
	if upstream == nil || upstream.Host == "" || (upstream.Scheme != "http" && upstream.Scheme != "https") {
		return nil, errors.New("openaihttp: the upstream needs an http or https URL with a host")
	}
	if t == nil {
		return nil, errors.New("openaihttp: NewProxy needs a tracker")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Proxy{up: upstream, t: t, cfg: cfg, host: upstream.Hostname(), transport: cfg.transport, urls: map[string]string{}}
	if p.transport == nil {
		p.transport = NewTransport(TransportConfig{})
	}
	p.port, _ = strconv.Atoi(upstream.Port())
	if p.port == 0 {
		p.port = 80
		if upstream.Scheme == "https" {
			p.port = 443
		}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     upstreamTransport{p.transport},
		FlushInterval: -1, // every write reaches the client at once
		BufferPool:    copyBuffers{},
		ErrorHandler:  p.upstreamFailed,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	return p, nil
}

// copyBufferSize is ReverseProxy's own copy buffer's size.
const copyBufferSize = 32 << 10

// copyPool holds the buffers responses are copied through: ReverseProxy
// would allocate 32 KiB per request, most of what a proxied stream
// allocates, and so most of its garbage collection.
var copyPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

// copyBuffers is the proxy's httputil.BufferPool.
type copyBuffers struct{}

var _ httputil.BufferPool = copyBuffers{}

func (copyBuffers) Get() []byte { return copyPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if cap(b) == copyBufferSize {
		copyPool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

// Closing says the server is about to close the connections of the
// requests still running, its drain time over (http.Server.Close after a
// Shutdown that timed out): each of them then ends as unfinished, with
// error.type unfinished, not as an abort — no client left. Call it before
// closing them.
func (p *Proxy) Closing() { p.cfg.closing.Store(true) }

// CloseIdleConnections closes the idle connections to the upstream.
func (p *Proxy) CloseIdleConnections() {
	if t, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// TransportConfig bounds the proxy's calls upstream; zero fields take the
// defaults.
type TransportConfig struct {
	DialTimeout time.Duration // DefaultDialTimeout
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers, which a server that does not stream sends only when the
	// whole completion is done: hence minutes.
	ResponseHeaderTimeout time.Duration // DefaultResponseHeaderTimeout
	IdleConnTimeout       time.Duration // DefaultIdleConnTimeout
	MaxIdleConnsPerHost   int           // DefaultMaxIdleConnsPerHost
}

// NewTransport returns the transport NewProxy uses by default: a clone of
// http.DefaultTransport with these bounds, and enough idle connections per
// host for a proxy (the default's 2 would dial anew for most requests).
func NewTransport(c TransportConfig) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: orDefault(c.DialTimeout, DefaultDialTimeout), KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	t.ResponseHeaderTimeout = orDefault(c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	t.IdleConnTimeout = orDefault(c.IdleConnTimeout, DefaultIdleConnTimeout)
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	if c.MaxIdleConnsPerHost > 0 {
		t.MaxIdleConnsPerHost = c.MaxIdleConnsPerHost
	}
	t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
	return t
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// upstreamPath maps the path a client asked for onto the upstream's base
// path without doubling what they share: with base /v1,
// /v1/chat/completions stays and /chat/completions becomes
// /v1/chat/completions; with /openai/v1, /v1/models becomes
// /openai/v1/models. Both are escaped paths.
func upstreamPath(base, path string) string {
	base = strings.TrimSuffix(base, "/")
	if base == "" {
		return path
	}
	if path == "" {
		path = "/"
	}
	for i := 0; i < len(base); i++ {
		if base[i] != '/' {
			continue
		}
		if tail := base[i:]; path == tail || strings.HasPrefix(path, tail+"/") {
			return base[:i] + path
		}
	}
	return base + path
}

// route returns the traced route of r, matched on the path the client
// asked for or the path it goes to upstream.
func (p *Proxy) route(r *http.Request) (route, op string, ok bool) {
	if route, op, ok = p.cfg.route(r.Method, r.URL.Path); ok {
		return route, op, ok
	}
	return p.cfg.route(r.Method, upstreamPath(p.up.Path, r.URL.Path))
}

type callKey struct{}

// bodyKey is an untraced request's body as the proxy reads it
// (timeoutBody), for the error handler: ReverseProxy may hand it a
// wrapper.
type bodyKey struct{}

// timeoutReader is a client's body as the proxy reads it, telling whether
// reading it hit the server's deadline.
type timeoutReader interface {
	timedOut() bool
	sawTimeout() bool
}

// bodyOf is the client's body as the proxy reads it, if any: a traced
// request's scanBody, an untraced one's timeoutBody.
func bodyOf(r *http.Request) timeoutReader {
	if c, _ := r.Context().Value(callKey{}).(*call); c != nil {
		if c.body != nil {
			return c.body
		}
		return nil
	}
	tb, _ := r.Context().Value(bodyKey{}).(*timeoutBody)
	if tb == nil {
		return nil
	}
	return tb
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	u := pr.Out.URL
	u.Scheme, u.Host = p.up.Scheme, p.up.Host
	escaped := upstreamPath(p.up.EscapedPath(), pr.In.URL.EscapedPath())
	if path, err := url.PathUnescape(escaped); err == nil {
		u.Path, u.RawPath = path, ""
		if u.EscapedPath() != escaped {
			u.RawPath = escaped
		}
	}
	switch {
	case p.up.RawQuery == "":
	case u.RawQuery == "":
		u.RawQuery = p.up.RawQuery
	default:
		u.RawQuery = p.up.RawQuery + "&" + u.RawQuery
	}
	pr.Out.Host = ""
	p.setXForwarded(pr)
	c, _ := pr.In.Context().Value(callKey{}).(*call)
	if c == nil {
		return // untraced: the caller's headers go on as they are
	}
	delete(pr.Out.Header, "Traceparent")
	delete(pr.Out.Header, "Tracestate")
	// Every header the propagators write is ours, not the caller's left
	// beside it (an X-B3-Flags: 1 the B3 propagator would not overwrite).
	for _, f := range p.cfg.propFields {
		delete(pr.Out.Header, f)
	}
	ctx := c.in.ctx
	if !c.in.trusted {
		// B3's and Jaeger's debug flag (and B3's deferred decision) ride
		// in the extracted context and would be injected as they came,
		// sampling upstream whatever this proxy decided: an untrusted
		// caller's flags decide nothing, so only its baggage goes on.
		ctx = context.Background()
		if bag := baggage.FromContext(c.in.ctx); bag.Len() > 0 {
			ctx = baggage.ContextWithBaggage(ctx, bag)
		}
	}
	p.cfg.prop.Inject(trace.ContextWithSpanContext(ctx, c.upstreamSpan()), headerCarrier(pr.Out.Header))
}

// setXForwarded sets the X-Forwarded-* headers of the upstream request
// (Rewrite has removed the incoming ones from it). Behind a load balancer
// the client's address is appended to the incoming X-Forwarded-For, as
// httputil.ReverseProxy's Director form does, and the incoming
// X-Forwarded-Host and -Proto (the host and scheme the client used) go on;
// this hop's stand in when absent. RFC 7239's Forwarded, which Rewrite
// strips too, goes on as it came, as in the Director form. From a public
// endpoint's caller (WithPublicEndpoint) nothing incoming is trusted, as
// with its trace context unless trusted (WithTrustIncomingSamplingFunc):
// the chain starts at the caller's address, host and scheme are this
// hop's, and no Forwarded goes on.
func (p *Proxy) setXForwarded(pr *httputil.ProxyRequest) {
	in, c := pr.In.Header, p.cfg
	if c.public != nil && c.public(pr.In) && !(c.trust != nil && c.trust(pr.In)) {
		pr.SetXForwarded()
		return
	}
	if prior := in["X-Forwarded-For"]; len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = prior // SetXForwarded appends to it
	}
	pr.SetXForwarded()
	for _, k := range [...]string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
		if v := in[k]; len(v) > 0 {
			pr.Out.Header[k] = slices.Clone(v)
		}
	}
}

// upstreamTransport notes when a traced request goes upstream, when its
// response headers came and when its body ended.
type upstreamTransport struct{ rt http.RoundTripper }

func (t upstreamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c, _ := r.Context().Value(callKey{}).(*call)
	if c == nil {
		return t.rt.RoundTrip(r)
	}
	c.sent = time.Now()
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	c.respAt, c.upStatus, c.upProto = time.Now(), resp.StatusCode, protoVersion(resp.ProtoMajor, resp.ProtoMinor)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// ReverseProxy tunnels through the body, which must stay the
		// transport's io.ReadWriteCloser.
		return resp, nil
	}
	c.ub = upstreamBody{ReadCloser: resp.Body, c: c}
	resp.Body = &c.ub
	return resp, nil
}

// upstreamBody notes when the upstream's body ended, and how.
type upstreamBody struct {
	io.ReadCloser
	c *call
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.c.bodyEnd.IsZero() {
		b.c.bodyEnd = time.Now()
		switch {
		case err == io.EOF:
		case b.c.r.Context().Err() != nil:
			// The client left, which cancelled the call: the
			// proxy's doing, not the upstream's failure.
			b.c.cancelled = true
		default:
			b.c.bodyErr = true
		}
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	if b.c.bodyEnd.IsZero() {
		b.c.bodyEnd = time.Now()
	}
	return b.ReadCloser.Close()
}

// upstreamFailed answers for an upstream that failed before it did.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	code, errType := http.StatusBadGateway, ErrorUpstream
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		errType = ErrorConnectionRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		errType, code = ErrorTimeout, http.StatusGatewayTimeout
	}
	c, _ := r.Context().Value(callKey{}).(*call) // nil for a request not traced
	// The server ended the request on a read deadline: the client was too
	// slow to send its body (ReadTimeout), and is told so rather than
	// answered 200 with nothing, or 504 as if the upstream were slow. An
	// HTTP/1 server cancels the request then; an HTTP/2 one fails the
	// stream's body alone, the request still live.
	if tb := bodyOf(r); tb != nil && (tb.sawTimeout() || r.Context().Err() != nil && tb.timedOut()) {
		if r.ProtoMajor < 2 {
			w.Header().Set("Connection", "close") // HTTP/2 would close every stream of the connection
		}
		w.WriteHeader(http.StatusRequestTimeout)
		if c != nil {
			c.ex.cut = strconv.Itoa(http.StatusRequestTimeout) // the server's doing, not the client leaving
		}
		return
	}
	if r.Context().Err() != nil {
		if c != nil {
			c.cancelled = true
		}
		return // the client is gone (and the call cancelled): an abort, nobody to answer
	}
	if c != nil && c.upErr == "" {
		c.upErr, c.upErrAt = errType, time.Now()
	}
	p.cfg.logger.Warn("upstream request failed", "err", err, "error_type", errType)
	w.WriteHeader(code)
}

// ServeHTTP proxies r, tracing it when it is an inference request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The body streams upstream while the response streams back: without
	// this an HTTP/1 server would consume what is left of the body, under
	// the transport's feet, once the response begins.
	_ = http.NewResponseController(w).EnableFullDuplex()
	route, op, ok := p.route(r)
	if !ok {
		p.pass(w, r)
		return
	}
	c := p.newCall(r, route, op)
	r2 := r.WithContext(context.WithValue(r.Context(), callKey{}, c))
	if c.body != nil {
		r2.Body = c.body
	}
	c.rw = respWriter{ResponseWriter: w, ex: c.ex, call: c, flushEach: true}
	c.ex.gone.watch(r.Context())
	defer func() {
		v := recover()
		// ReverseProxy aborts the response (http.ErrAbortHandler) when
		// copying it fails: the client left, or the upstream did.
		c.finish(w, outcome{end: time.Now(), gone: c.ex.gone.done(), aborted: v != nil || c.bodyErr,
			upstreamErr: c.upErr, upstreamErrAt: c.upErrAt})
		if v != nil {
			panic(v)
		}
	}()
	p.rp.ServeHTTP(&c.rw, r2)
}

// pass proxies an untraced request, counting it in the HTTP server metric.
func (p *Proxy) pass(w http.ResponseWriter, r *http.Request) {
	if !p.cfg.httpMetrics {
		p.rp.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	if r.Body != nil && r.Body != http.NoBody {
		tb := &timeoutBody{ReadCloser: r.Body}
		r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, tb))
		r.Body = tb
	}
	defer func() {
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		p.cfg.inst.recordServer(r, "", sw.status, httpErrorType(sw.status, ""), time.Since(start))
	}()
	p.rp.ServeHTTP(sw, r)
}

// call is one traced request through the proxy. Its fields are written on
// the goroutine serving the request (ReverseProxy calls the transport and
// reads the response there); the request body is read by the transport's
// own goroutine, behind scanBody's lock.
type call struct {
	p     *Proxy
	r     *http.Request
	route string
	ex    *exchange
	body  *scanBody
	in    incoming
	id    string

	traceID    trace.TraceID          // the root's, decided before the upstream is called
	head       otelstats.HeadDecision // the head sampler's, told upstream
	clientSpan trace.SpanID           // the upstream call's span, whose id the upstream receives
	arrived    bool

	sent, respAt, bodyEnd time.Time
	upStatus              int
	upProto               string
	bodyErr               bool
	// cancelled: reading the upstream's body failed because the client
	// had left (its context ended, cancelling the call).
	cancelled bool
	upErr     string
	upErrAt   time.Time

	// The request's parts, allocated with it.
	exv   exchange
	stall stallDetector
	bodyv scanBody
	rw    respWriter
	ub    upstreamBody
}

func (p *Proxy) newCall(r *http.Request, route, op string) *call {
	now := time.Now()
	c := &call{p: p, r: r, route: route, id: p.cfg.newRequestID(r)}
	c.exv.init(p.cfg, op, now)
	c.ex = &c.exv
	c.stall.init(p.cfg.stall)
	c.ex.stall = &c.stall
	c.in = p.cfg.incoming(r)
	if sc := trace.SpanContextFromContext(c.in.ctx); sc.IsValid() {
		c.traceID = sc.TraceID()
	} else {
		c.traceID = spans.NewTraceID()
	}
	// Decided now, not at Arrive (once the body named the model), so that
	// the traceparent sent upstream carries the decision.
	c.head = p.t.HeadSample(c.in.ctx, c.traceID, op, c.in.trusted)
	c.clientSpan = spans.NewSpanID()
	fields := requestFields
	if p.t.CapturesContent() {
		fields = requestFieldsCapture
	}
	if r.Body != nil && r.Body != http.NoBody {
		c.body = &c.bodyv
		c.body.rest = r.Body
		c.body.sv.init(fields, c.ex.hold)
		c.body.s = &c.body.sv
	}
	return c
}

// upstreamSpan is the span context the upstream receives: the upstream
// call's span, a child of the request's root, emitted when the request
// has ended (and its trace is kept).
func (c *call) upstreamSpan() trace.SpanContext {
	var ts trace.TraceState
	if sc := trace.SpanContextFromContext(c.in.ctx); sc.IsValid() {
		ts = sc.TraceState()
	}
	var flags trace.TraceFlags
	if c.head.Sampled() {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: c.traceID, SpanID: c.clientSpan,
		TraceFlags: flags, TraceState: ts})
}

// arrive records ARRIVED, at the time the request came, once the body has
// said what it could: when the upstream answers or fails (it has read the
// body by then), or at the end.
func (c *call) arrive() {
	if c.arrived {
		return
	}
	c.arrived = true
	var ri requestInfo
	model, problem := UnknownModel, BodyNotJSON
	var parsed time.Time
	var input []otelstats.Message
	inputCut := false
	if c.body != nil {
		if c.upErr != "" {
			c.body.drain(c.p.cfg.maxBody, true)
		}
		ri, model, problem, parsed, input, inputCut = c.body.result()
	}
	if parsed.IsZero() {
		parsed = time.Now()
	}
	ex := c.ex
	q, _ := c.p.t.Arrive(c.in.ctx, c.id, c.p.cfg.arrival(c.r, &c.in, onArrival{time: ex.arrived, model: model, op: ex.op,
		traceID: c.traceID, head: c.head, onFinish: c.finished}))
	c.p.cfg.noteBody(q, c.r, c.route, &ri, problem)
	capture := c.p.t.CapturesContent()
	ex.begin(q, ri, parsed, isResponsesAPI(c.route), capture)
	ex.input, ex.inputCut = input, inputCut
}

// finish records the request's end and its metrics.
func (c *call) finish(w http.ResponseWriter, o outcome) {
	c.arrive()
	if c.body != nil {
		_ = c.body.rest.Close()
	}
	c.ex.finish(o, func(u otelstats.Update) { c.metrics(&o, u) })
	c.ex.setTrailer(w.Header())
}

// metrics records the call's stalls and HTTP metrics.
func (c *call) metrics(o *outcome, u otelstats.Update) {
	ex, cfg := c.ex, c.p.cfg
	if n := ex.stall.count; n > 0 {
		cfg.inst.stalls.Add(context.Background(), int64(n), metric.WithAttributes(attributes.OperationName.String(ex.op)))
	}
	if !cfg.httpMetrics {
		return
	}
	cfg.inst.recordServer(c.r, c.route, ex.status, httpErrorType(ex.status, u.ErrorType), o.end.Sub(ex.arrived))
	if !c.sent.IsZero() {
		end := c.bodyEnd
		if end.IsZero() {
			end = o.end
		}
		cfg.inst.recordClient(http.MethodPost, c.p.up.Scheme, c.p.host, c.p.port, c.upStatus, c.clientErrorType(u.FinishReason == otelstats.FinishAbort), end.Sub(c.sent))
	}
}

// clientErrorType is the upstream call's error.type. A call cancelled
// because the client left is no upstream failure: an abort when the
// request aborted, no error when the client had its whole response.
func (c *call) clientErrorType(aborted bool) string {
	switch {
	case c.upErr != "":
		return c.upErr
	case c.bodyErr:
		return ErrorUpstream
	case c.upStatus >= 400:
		return strconv.Itoa(c.upStatus)
	case c.cancelled && aborted:
		return otelstats.FinishAbort
	}
	return ""
}

// finished is the request's finish hook: when its trace was kept, the
// proxy's own spans join it.
func (c *call) finished(s *otelstats.RequestStats) {
	if !s.Sampled || !c.ex.finishing.Load() {
		return // dropped, or ended by the tracker while still being served
	}
	c.emit(s.FinishReason == otelstats.FinishAbort)
}

// timeoutBody notes whether reading a client's body hit a deadline.
type timeoutBody struct {
	io.ReadCloser
	timeout atomic.Bool
}

func (b *timeoutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if isTimeout(err) {
		b.timeout.Store(true)
	}
	return n, err
}

func (b *timeoutBody) timedOut() bool { return b.timeout.Load() || probeTimeout(b.ReadCloser) }

// sawTimeout reports whether a read of the body has hit a deadline,
// without reading (a live request's body may block).
func (b *timeoutBody) sawTimeout() bool { return b.timeout.Load() }

// probeTimeout reports whether reading r fails on a deadline: it tells a
// client too slow to send its body (the server's ReadTimeout passed; the
// deadline stays passed) from one that left, once the request's context
// has ended and the transport's read of the body may not have returned
// yet.
func probeTimeout(r io.Reader) bool {
	var one [1]byte
	_, err := r.Read(one[:])
	return isTimeout(err)
}

func isTimeout(err error) bool {
	if err == nil || err == io.EOF {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// statusWriter remembers the status of an untraced response, keeping
// http.Flusher and Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
