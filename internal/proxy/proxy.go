// Package proxy is llmtrace's tracing reverse proxy for OpenAI-compatible
// inference servers (vLLM, SGLang, TGI, llama.cpp, Ollama, …). It traces
// each request as the client sees it, through an otelstats.Tracker — so the
// request's root span and the SPEC's metrics (TTFT, TPOT, ITL, e2e) are the
// same as for an instrumented engine — and adds spans for what only a proxy
// sees: the wait for the first content token, the stream, and stalls in it.
//
// # Spans
//
//	span                        kind      from → to
//	{operation} {model}         SERVER    request received → response ended (the Tracker's root)
//	llm.input_processing        INTERNAL  request received → its body was read (only when a usage gives the prompt's size)
//	llm.detokenize              INTERNAL  first → last content chunk delivered (the Tracker's)
//	llm.proxy.wait_first_token  INTERNAL  request sent upstream → first content chunk delivered to the client
//	                                      (→ response end when none came)
//	llm.proxy.stream            INTERNAL  first content chunk → last byte delivered; events llm.proxy.stall
//
// Both llm.proxy.* spans are children of the root, and are emitted only when
// the Tracker keeps the root (end-of-request sampling). The traceparent sent
// upstream carries the root's span id, so the engine's own request span
// (vLLM's llm_request) becomes a child of the root: the proxy's spans are
// built after the response ended, when it is too late to hand their ids
// downstream.
//
// # Stalls
//
// A content chunk that arrives after a gap longer than StallPolicy.Factor
// (8) times the median of the request's previous gaps (the last 64), and
// longer than StallPolicy.Min (100 ms), once 4 gaps are known, is a stall:
// an llm.proxy.stall event on llm.proxy.stream at the gap's start, with
// llm.proxy.stall.gap_s, llm.proxy.stall.median_gap_s and
// llm.proxy.stall.chunk (the index of the content chunk that ended it), and
// one more in the llm.proxy.stalls counter. A preemption, another request's
// long prefill joining the batch, or a paused engine shows up this way.
//
// # What the Tracker sees
//
// ARRIVED when the request is received; for a stream, one DETOKENIZED per
// content chunk (not role-only, usage-only or keep-alive events), timed when
// it was written to the client, so TTFT ends at the first chunk with
// content; for a JSON response, one delivery when its first byte was
// written. Deliveries are held (timestamps only, at most 4,096) until the
// response ends so that a final usage can set the token counts: the output
// tokens then equal usage.completion_tokens, spread over the chunks, and the
// prompt's size goes on INPUT_PROCESSED (with the sampling parameters, timed
// when the body was read). Without a usage each content chunk counts one
// token per choice, and there is no INPUT_PROCESSED: the prompt's size is
// never made up. FINISHED ends it:
//
//   - the finish reason of the response ("stop" when none was given);
//   - the upstream's status ≥ 400: error, error.type the status code;
//   - the upstream unreachable or failing before answering: error,
//     error.type connection_refused, timeout or upstream_error (502/504
//     to the client);
//   - the upstream failing mid-response: error, error.type upstream_error;
//     an error event in the stream: stream_error (response_failed for the
//     Responses API);
//   - the client gone before the response ended: abort.
package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Span, event, attribute and metric names of the proxy.
const (
	SpanWaitFirstToken = attributes.SpanProxyWaitFirstToken
	SpanStream         = attributes.SpanProxyStream
	EventStall         = attributes.EventProxyStall
	EventHeaders       = attributes.EventProxyHeaders
	MetricStalls       = attributes.MetricProxyStalls

	AttrChunks        = attributes.ProxyChunks        // SSE events with data
	AttrContentChunks = attributes.ProxyContentChunks // of which carried content
	AttrStalls        = attributes.ProxyStalls
	AttrGapMedian     = attributes.ProxyGapMedian
	AttrGapMax        = attributes.ProxyGapMax
	AttrHeadersAfter  = attributes.ProxyHeadersAfter // response headers − request sent
	AttrStallGap      = attributes.ProxyStallGap
	AttrStallMedian   = attributes.ProxyStallMedian
	AttrStallChunk    = attributes.ProxyStallChunk
	AttrResponseID    = attributes.ResponseID
	AttrResponseModel = attributes.ResponseModel
	AttrStatusCode    = attributes.HTTPStatusCode
	AttrServerAddress = attributes.ServerAddress
	AttrServerPort    = attributes.ServerPort
)

// Error types of upstream failures.
const (
	ErrorConnectionRefused = "connection_refused"
	ErrorTimeout           = "timeout"
	ErrorUpstream          = "upstream_error"
)

// DefaultRoutes are the traced paths (POST) and their GenAI operations.
var DefaultRoutes = map[string]string{
	"/v1/chat/completions": "chat",
	"/v1/completions":      "text_completion",
	"/v1/responses":        "chat",
	"/v1/embeddings":       "embeddings",
}

// DefaultMaxBody is how much of a request body is read before it is sent
// upstream (to learn the model); a longer body goes through untraced.
const DefaultMaxBody = 16 << 20

// maxHeld bounds the deliveries held for the final usage.
const maxHeld = 4096

// maxStallEvents bounds the stall events on one stream span.
const maxStallEvents = 32

// Config configures a Proxy.
type Config struct {
	// Upstream is the server's base URL, e.g. http://127.0.0.1:8000.
	Upstream *url.URL
	// Transport carries requests upstream (default: a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// TracerProvider and MeterProvider receive the proxy's own spans and
	// counter (default: the global ones). Give the Tracker the same ones.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Propagator reads the caller's trace context and writes the request's
	// upstream (default: W3C Trace Context). Whether the caller's sampled
	// flag counts is the Tracker's WithTrustParentSampling.
	Propagator propagation.TextMapPropagator
	// Routes maps traced paths to operations (default DefaultRoutes).
	Routes map[string]string
	// MaxBody bounds the request body read ahead (default 16 MiB).
	MaxBody int64
	// Stall is the stall policy.
	Stall StallPolicy
	// Logger gets proxy errors; none when nil.
	Logger *slog.Logger
}

// Proxy is an http.Handler. Create it with New and end it with Shutdown.
type Proxy struct {
	cfg      Config
	tr       *otelstats.Tracker
	rp       *httputil.ReverseProxy
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	log      *slog.Logger
	stalls   metric.Int64Counter
	host     string
	port     int
	finished sync.Map // request id → *exchange, until its FINISHED is recorded
}

// New returns a proxy to cfg.Upstream recording into a new Tracker built
// with opts (after WithRequestTTL(0), before a hook of the proxy's own).
func New(cfg Config, opts ...otelstats.Option) (*Proxy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Host == "" {
		return nil, errors.New("proxy: Config.Upstream needs a scheme and host")
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = noop.NewMeterProvider()
	}
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	if cfg.Routes == nil {
		cfg.Routes = DefaultRoutes
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	cfg.Stall = cfg.Stall.withDefaults()
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		cfg:    cfg,
		tracer: cfg.TracerProvider.Tracer("github.com/llmtrace/llmtrace/internal/proxy", trace.WithInstrumentationVersion(otelstats.Version())),
		prop:   cfg.Propagator,
		log:    lg,
		host:   cfg.Upstream.Hostname(),
	}
	p.port, _ = strconv.Atoi(cfg.Upstream.Port())
	if p.port == 0 {
		p.port = 80
		if cfg.Upstream.Scheme == "https" {
			p.port = 443
		}
	}
	var err error
	p.stalls, err = cfg.MeterProvider.Meter("github.com/llmtrace/llmtrace/internal/proxy").Int64Counter(MetricStalls,
		metric.WithUnit("{stall}"), metric.WithDescription("Gaps between stream chunks far above the request's own median."))
	if err != nil {
		return nil, err
	}
	// The proxy ends every request it starts, and records a stream's
	// deliveries only at its end: a long stream is not abandoned.
	opts = append(append([]otelstats.Option{otelstats.WithRequestTTL(0)}, opts...), otelstats.WithOnFinish(p.onFinish))
	if p.tr, err = otelstats.NewTracker(opts...); err != nil {
		return nil, err
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       p.rewrite,
		Transport:     timingTransport{cfg.Transport},
		FlushInterval: -1, // every write reaches the client at once
		ErrorHandler:  p.upstreamFailed,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	return p, nil
}

// Tracker returns the proxy's tracker.
func (p *Proxy) Tracker() *otelstats.Tracker { return p.tr }

// Shutdown ends the tracker (requests still in flight finish as
// unfinished) and closes idle upstream connections. It does not shut the
// providers down.
func (p *Proxy) Shutdown(ctx context.Context) error {
	if t, ok := p.cfg.Transport.(interface{ CloseIdleConnections() }); ok {
		defer t.CloseIdleConnections()
	}
	return p.tr.Shutdown(ctx)
}

// onFinish learns whether the tracker kept a request's trace.
func (p *Proxy) onFinish(s *otelstats.RequestStats) {
	if v, ok := p.finished.Load(s.RequestID); ok {
		v.(*exchange).sampled = s.Sampled
	}
}

type exKey struct{}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.cfg.Upstream)
	pr.SetXForwarded()
	ex, _ := pr.In.Context().Value(exKey{}).(*exchange)
	if ex == nil {
		return // untraced: the caller's headers go on as they are
	}
	pr.Out.Header.Del("traceparent")
	pr.Out.Header.Del("tracestate")
	p.prop.Inject(trace.ContextWithSpanContext(pr.Out.Context(), ex.q.SpanContext()), propagation.HeaderCarrier(pr.Out.Header))
}

// timingTransport notes when a traced request goes upstream.
type timingTransport struct{ rt http.RoundTripper }

func (t timingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if ex, _ := r.Context().Value(exKey{}).(*exchange); ex != nil {
		ex.sent = time.Now()
	}
	return t.rt.RoundTrip(r)
}

func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusBadGateway
	errType := ErrorUpstream
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		errType = ErrorConnectionRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		errType, code = ErrorTimeout, http.StatusGatewayTimeout
	}
	if ex, _ := r.Context().Value(exKey{}).(*exchange); ex != nil {
		ex.upstreamErr, ex.upstreamErrAt = errType, time.Now()
	}
	if r.Context().Err() != nil {
		return // the client is gone; nobody to answer
	}
	p.log.Warn("upstream request failed", "err", err, "error_type", errType)
	w.WriteHeader(code)
}

func (p *Proxy) operation(r *http.Request) (string, bool) {
	if r.Method != http.MethodPost {
		return "", false
	}
	path := r.URL.Path
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	op, ok := p.cfg.Routes[path]
	return op, ok
}

// requestBody is what the proxy reads from a request.
type requestBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int64          `json:"top_k"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	Seed                *int64          `json:"seed"`
	N                   *int64          `json:"n"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	Stop                json.RawMessage `json:"stop"`
}

func (b *requestBody) sampling() *otelstats.SamplingParams {
	sp := &otelstats.SamplingParams{Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK, Seed: b.Seed, N: b.N,
		FrequencyPenalty: b.FrequencyPenalty, PresencePenalty: b.PresencePenalty, MaxTokens: b.MaxTokens}
	if sp.MaxTokens == nil {
		sp.MaxTokens = b.MaxCompletionTokens
	}
	if sp.MaxTokens == nil {
		sp.MaxTokens = b.MaxOutputTokens
	}
	var one string
	var many []string
	if json.Unmarshal(b.Stop, &one) == nil && one != "" {
		sp.Stop = []string{one}
	} else if json.Unmarshal(b.Stop, &many) == nil && len(many) > 0 {
		sp.Stop = many[:min(len(many), 8)]
	}
	return sp
}

// ServeHTTP proxies r, tracing it when it is an inference request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op, ok := p.operation(r)
	if !ok || r.Body == nil || r.Body == http.NoBody {
		p.rp.ServeHTTP(w, r)
		return
	}
	arrived := time.Now()
	prefix, err := io.ReadAll(io.LimitReader(r.Body, p.cfg.MaxBody+1))
	var rb requestBody
	if err != nil || int64(len(prefix)) > p.cfg.MaxBody || json.Unmarshal(prefix, &rb) != nil || rb.Model == "" {
		// Not something we can trace: it goes upstream exactly as it came
		// (a read error included).
		r.Body = &replayBody{prefix: prefix, rest: r.Body, err: err}
		p.rp.ServeHTTP(w, r)
		return
	}
	_ = r.Body.Close()
	parsed := time.Now()

	id := newRequestID()
	ctx := p.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	q, _ := p.tr.Arrive(ctx, id, otelstats.Arrival{Time: arrived, Model: rb.Model, Operation: op})
	ex := &exchange{
		p: p, q: q, id: id, op: op, arrived: arrived, parsed: parsed, sampling: rb.sampling(),
		wantStream: rb.Stream, stall: newStallDetector(p.cfg.Stall), reqCtx: r.Context(),
	}
	p.finished.Store(id, ex)
	defer p.finished.Delete(id)

	out := r.Clone(context.WithValue(r.Context(), exKey{}, ex))
	out.Body = io.NopCloser(bytes.NewReader(prefix))
	out.ContentLength = int64(len(prefix))
	out.Header.Del("Transfer-Encoding")
	out.TransferEncoding = nil
	rw := &respWriter{ResponseWriter: w, ex: ex}
	defer func() {
		if v := recover(); v != nil {
			// ReverseProxy aborts the response (http.ErrAbortHandler) when
			// copying it fails: the client left, or the upstream did.
			ex.end(time.Now(), true)
			panic(v)
		}
		ex.end(time.Now(), false)
	}()
	p.rp.ServeHTTP(rw, out)
}

// replayBody yields prefix, then the rest of the original body (or the
// error that stopped reading it).
type replayBody struct {
	prefix []byte
	rest   io.ReadCloser
	err    error
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error { return b.rest.Close() }

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "proxy-" + hex.EncodeToString(b[:])
}

// respWriter passes everything to the client first, then lets the exchange
// read a copy.
type respWriter struct {
	http.ResponseWriter
	ex          *exchange
	wroteHeader bool
}

func (w *respWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	if code >= 200 && !w.wroteHeader {
		w.wroteHeader = true
		w.ex.header(code, w.Header(), time.Now())
	}
}

func (w *respWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.ex.wrote(time.Now(), b[:n], err)
	return n, err
}

// Flush flushes the client's connection (ReverseProxy calls it after every
// write).
func (w *respWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the writer underneath.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// exchange is one traced request. Everything but sampled (set by the
// tracker's hook during FINISHED, on the same goroutine) happens on the
// request's handler goroutine.
type exchange struct {
	p        *Proxy
	q        *otelstats.Request
	id, op   string
	sampling *otelstats.SamplingParams
	reqCtx   context.Context

	arrived, parsed, sent, headersAt time.Time
	status                           int
	sse, wantStream, opaque          bool

	upstreamErr   string
	upstreamErrAt time.Time
	writeErrAt    time.Time
	lastWrite     time.Time

	reader        sseReader
	events        int
	contentChunks int
	firstContent  time.Time
	lastContent   time.Time
	held          []time.Time // content deliveries not yet recorded
	heldWeight    []int       // their choices with content
	live          bool        // held overflowed: record as they come
	recorded      int         // tokens recorded live

	body     []byte // a non-stream response, up to maxEvent
	bodyOver bool

	reason, errType string
	sawEnd          bool // [DONE], a finish reason or a final event
	use             *usage
	respID, model   string

	stall      *stallDetector
	stallCount int
	stallEvs   []trace.EventOption
	stallTimes []time.Time

	sampled bool
	ended   bool
}

func (ex *exchange) header(code int, h http.Header, at time.Time) {
	ex.status, ex.headersAt = code, at
	ct := strings.ToLower(h.Get("Content-Type"))
	ex.sse = strings.HasPrefix(ct, "text/event-stream") || ct == "" && ex.wantStream
	ce := h.Get("Content-Encoding")
	ex.opaque = ce != "" && !strings.EqualFold(ce, "identity")
}

func (ex *exchange) wrote(at time.Time, b []byte, err error) {
	if err != nil && ex.writeErrAt.IsZero() {
		ex.writeErrAt = at
	}
	if len(b) == 0 || !ex.writeErrAt.IsZero() || ex.reqCtx.Err() != nil {
		return // the client is gone: nothing more is delivered
	}
	ex.lastWrite = at
	switch {
	case ex.opaque:
	case ex.sse:
		ex.reader.feed(b, func(data []byte, over bool) { ex.event(at, data, over) })
	default:
		if ex.firstContent.IsZero() {
			ex.firstContent = at
		}
		if len(ex.body)+len(b) > maxEvent {
			ex.bodyOver = true
		} else if !ex.bodyOver {
			ex.body = append(ex.body, b...)
		}
	}
}

// gone reports whether the client left before the response was complete:
// a write to it failed, or its context ended while the response was
// aborted or before a stream's end ([DONE] or a finish reason) went out.
func (ex *exchange) gone(aborted bool) bool {
	if ex.deliveredEnd() {
		return false
	}
	if !ex.writeErrAt.IsZero() {
		return true
	}
	if ex.reqCtx.Err() == nil {
		return false
	}
	return aborted || ex.sse && !ex.sawEnd || ex.headersAt.IsZero()
}

func (ex *exchange) event(at time.Time, data []byte, over bool) {
	ex.events++
	if over {
		return
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		ex.sawEnd = true
		return
	}
	var m message
	if json.Unmarshal(data, &m) != nil {
		return
	}
	ex.note(&m)
	if n := m.contentChoices(); n > 0 {
		ex.deliver(at, n)
	}
}

// note takes the ids, usage and finish reason of a chunk or body.
func (ex *exchange) note(m *message) {
	if m.ID != "" && ex.respID == "" {
		ex.respID = m.ID
	}
	if m.Model != "" && ex.model == "" {
		ex.model = m.Model
	}
	if m.Response != nil {
		if ex.respID == "" {
			ex.respID = m.Response.ID
		}
		if ex.model == "" {
			ex.model = m.Response.Model
		}
	}
	if u := m.usage(); u != nil {
		ex.use = u
	}
	if r, e := m.finish(); r != "" && (ex.reason == "" || e != "") {
		ex.reason, ex.errType, ex.sawEnd = r, e, true
	}
}

// deliver notes a content chunk of n choices written to the client at at.
func (ex *exchange) deliver(at time.Time, n int) {
	ex.contentChunks++
	if ex.firstContent.IsZero() {
		ex.firstContent = at
	} else {
		gap := at.Sub(ex.lastContent)
		if stall, med := ex.stall.add(gap); stall {
			ex.stallCount++
			if len(ex.stallEvs) < maxStallEvents {
				ex.stallTimes = append(ex.stallTimes, ex.lastContent)
				ex.stallEvs = append(ex.stallEvs, trace.WithAttributes(
					AttrStallGap.Float64(gap.Seconds()),
					AttrStallMedian.Float64(med.Seconds()),
					AttrStallChunk.Int(ex.contentChunks-1),
				))
			}
		}
	}
	ex.lastContent = at
	if ex.live {
		_ = ex.q.Detokenized(at, n, 0)
		ex.recorded += n
		return
	}
	ex.held = append(ex.held, at)
	ex.heldWeight = append(ex.heldWeight, n)
	if len(ex.held) >= maxHeld {
		// Too long to wait for the usage: record what is held, one token
		// per choice, and the rest as it comes.
		for i, t := range ex.held {
			_ = ex.q.Detokenized(t, ex.heldWeight[i], 0)
			ex.recorded += ex.heldWeight[i]
		}
		ex.held, ex.heldWeight, ex.live = nil, nil, true
	}
}

// end records the request's end at at; aborted says the response was
// aborted (the client or the upstream failed while it was copied).
func (ex *exchange) end(at time.Time, aborted bool) {
	if ex.ended {
		return
	}
	ex.ended = true
	if !ex.sse && len(ex.body) > 0 && !ex.bodyOver && !ex.opaque {
		var m message
		if json.Unmarshal(ex.body, &m) == nil {
			ex.note(&m)
		}
	}
	reason, errType := ex.outcome(aborted)
	if reason == otelstats.FinishAbort && !ex.writeErrAt.IsZero() {
		at = ex.writeErrAt
	}
	if !ex.upstreamErrAt.IsZero() {
		at = ex.upstreamErrAt
	}

	prompt, hasPrompt := ex.use.prompt()
	completion, hasCompletion := ex.use.completion()
	if hasPrompt && !ex.live {
		_ = ex.q.InputProcessed(ex.parsed, prompt, ex.sampling)
	}
	switch {
	case ex.sse && len(ex.held) > 0:
		ex.recordHeld(completion, hasCompletion)
	case !ex.sse && !ex.firstContent.IsZero() && ex.status < 400 && !ex.bodyOver:
		// A JSON response: one delivery when its first byte went out.
		n := completion
		if !hasCompletion {
			n = 0
			if ex.contentOfBody() {
				n = 1
			}
		}
		if n > 0 {
			_ = ex.q.Detokenized(ex.firstContent, n, 0)
		}
	}
	u := otelstats.Update{Kind: otelstats.KindFinished, Time: at, FinishReason: reason, ErrorType: errType}
	if hasPrompt && ex.live {
		u.NumPromptTokens = prompt
	}
	_ = ex.q.Record(u)
	if ex.stallCount > 0 {
		ex.p.stalls.Add(context.Background(), int64(ex.stallCount),
			metric.WithAttributes(attributes.OperationName.String(ex.op)))
	}
	if ex.sampled {
		ex.emit(at, errType)
	}
}

func (ex *exchange) contentOfBody() bool {
	var m message
	return json.Unmarshal(ex.body, &m) == nil && (m.contentChoices() > 0 || m.Object == "response")
}

// deliveredEnd reports whether a stream's end reached the client without a
// failed write: a client that closes right after [DONE] (as the OpenAI SDKs
// do) got the whole response, even if the upstream's body had not ended
// yet and the copy was aborted by the client leaving.
func (ex *exchange) deliveredEnd() bool {
	return ex.sse && ex.sawEnd && ex.writeErrAt.IsZero()
}

// outcome is the finish reason and error type of the request.
func (ex *exchange) outcome(aborted bool) (string, string) {
	switch {
	case ex.gone(aborted):
		return otelstats.FinishAbort, ""
	case ex.upstreamErr != "":
		return otelstats.FinishError, ex.upstreamErr
	case ex.status >= 400:
		return otelstats.FinishError, strconv.Itoa(ex.status)
	case aborted && !(ex.deliveredEnd() && ex.reqCtx.Err() != nil):
		return otelstats.FinishError, ErrorUpstream
	case ex.errType != "":
		return otelstats.FinishError, ex.errType
	case ex.reason != "":
		return ex.reason, ""
	}
	return otelstats.FinishStop, ""
}

// recordHeld records the held deliveries, spreading the usage's completion
// tokens over them in proportion to their choices, the first getting at
// least one.
func (ex *exchange) recordHeld(completion int, known bool) {
	total := 0
	for _, w := range ex.heldWeight {
		total += w
	}
	if !known || completion < 1 {
		completion = total
	}
	cum, prev := 0, 0
	for i, t := range ex.held {
		cum += ex.heldWeight[i]
		upto := (completion*cum + total - 1) / total // ceil
		_ = ex.q.Detokenized(t, upto-prev, 0)
		prev = upto
	}
	ex.held, ex.heldWeight = nil, nil
}

// emit starts and ends the proxy's spans as children of the request's
// root, with explicit times.
func (ex *exchange) emit(end time.Time, errType string) {
	ctx := trace.ContextWithSpanContext(context.Background(), ex.q.SpanContext())
	sent := ex.sent
	if sent.IsZero() {
		sent = ex.parsed
	}
	waitEnd := ex.firstContent
	if waitEnd.IsZero() {
		waitEnd = end
	}
	waitEnd = maxTime(waitEnd, sent)
	attrs := []attribute.KeyValue{AttrServerAddress.String(ex.p.host), AttrServerPort.Int(ex.p.port)}
	if ex.status != 0 {
		attrs = append(attrs, AttrStatusCode.Int(ex.status))
	}
	if !ex.headersAt.IsZero() {
		attrs = append(attrs, AttrHeadersAfter.Float64(ex.headersAt.Sub(sent).Seconds()))
	}
	_, w := ex.p.tracer.Start(ctx, SpanWaitFirstToken, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(sent), trace.WithAttributes(attrs...))
	if !ex.headersAt.IsZero() {
		w.AddEvent(EventHeaders, trace.WithTimestamp(clampTime(ex.headersAt, sent, waitEnd)))
	}
	if ex.firstContent.IsZero() && errType != "" {
		w.SetAttributes(attributes.ErrorType.String(errType))
		w.SetStatus(codes.Error, errType)
	}
	w.End(trace.WithTimestamp(waitEnd))

	if ex.firstContent.IsZero() || !ex.sse {
		return
	}
	streamEnd := maxTime(maxTime(ex.lastWrite, ex.lastContent), ex.firstContent)
	streamEnd = minTime(streamEnd, maxTime(end, ex.firstContent))
	attrs = []attribute.KeyValue{
		AttrChunks.Int(ex.events), AttrContentChunks.Int(ex.contentChunks), AttrStalls.Int(ex.stallCount),
		AttrGapMax.Float64(ex.stall.max.Seconds()),
	}
	if med, ok := ex.stall.median(); ok || len(ex.stall.sorted) > 0 {
		if !ok {
			med = ex.stall.sorted[len(ex.stall.sorted)/2]
		}
		attrs = append(attrs, AttrGapMedian.Float64(med.Seconds()))
	}
	if ex.respID != "" {
		attrs = append(attrs, AttrResponseID.String(ex.respID))
	}
	if ex.model != "" {
		attrs = append(attrs, AttrResponseModel.String(ex.model))
	}
	if c, ok := ex.use.cached(); ok {
		attrs = append(attrs, attributes.UsageCacheReadInput.Int(c))
	}
	_, s := ex.p.tracer.Start(ctx, SpanStream, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(ex.firstContent), trace.WithAttributes(attrs...))
	for i, ev := range ex.stallEvs {
		s.AddEvent(EventStall, trace.WithTimestamp(ex.stallTimes[i]), ev)
	}
	if errType != "" {
		s.SetAttributes(attributes.ErrorType.String(errType))
		s.SetStatus(codes.Error, errType)
	}
	s.End(trace.WithTimestamp(streamEnd))
}

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

func clampTime(t, lo, hi time.Time) time.Time { return minTime(maxTime(t, lo), hi) }
