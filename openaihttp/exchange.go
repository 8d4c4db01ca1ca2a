package openaihttp

import (
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// maxPending bounds the deliveries held while the prompt's size may still
// come with the final usage (stream_options.include_usage): 4,096 of 16
// bytes. Past it the layer stops waiting and records as chunks come.
const maxPending = 4096

// respMode is how the layer reads a response body.
type respMode uint8

const (
	modeUnknown respMode = iota
	modeSSE              // text/event-stream: each content event is a delivery
	modeJSON             // a JSON body, its top-level fields scanned as it goes by
	modeOpaque           // compressed, or not ours to read
	modeEmpty            // 204, 304: no body (RFC 9110), whole at its header
)

// pendingDelivery is a content chunk not yet recorded: when it reached the
// client (after the request's arrival) and how many choices had content.
type pendingDelivery struct {
	off time.Duration
	w   int32
}

// exchange is one traced request as the HTTP layer sees it: the request
// body's fields, every byte of the response as it is written to the
// client, and the rules that turn them into the tracker's updates. The
// middleware and the proxy share it; they differ only in where the bytes
// come from. Its methods are called by the goroutine serving the request,
// except handlerInput (any goroutine the handler uses), under mu.
type exchange struct {
	mu  sync.Mutex
	cfg *config
	q   *otelstats.Request
	op  string

	arrived  time.Time
	parsedAt time.Time // the request body was read: INPUT_PROCESSED's time when a usage gives the prompt's size
	ri       requestInfo
	sp       *otelstats.SamplingParams
	// gone watches the request's context: a write that began after the
	// client left delivered nothing.
	gone goneWatch
	// cut is the error type of a request the server ended itself (a
	// body slower than its read timeout: 408), or "".
	cut   string
	hold  *hold
	holdv hold // what hold points to

	status     int
	mode       respMode
	headerAt   time.Time
	firstWrite time.Time
	lastWrite  time.Time
	writeErrAt time.Time
	bytesOut   int64
	// promised is the response's Content-Length, when it had one: once
	// that many bytes are out, the client has the whole body and may
	// close before the handler returns without having aborted.
	promised    int64
	hasPromised bool

	sse    sseReader
	zbody  compressed  // a compressed response in one piece, set aside (compressed.go)
	later  laterWrites // writes of the stream not read yet (later.go)
	chunk  chunkJSON
	at     time.Time // the write being read, for the events it completes
	obs    observed
	events int // SSE events with data
	chunks int // of which carried content (deliveries)
	body   *fieldScanner

	// Input processing: recorded with the prompt's size once known, or
	// given up on (inputDone without inputRecorded) when output must be
	// recorded first.
	inputDone, inputRecorded bool
	prompt                   int64 // -1 while unknown

	// Deliveries not yet recorded: all of them while waiting for the final
	// usage, else the last one only, whose count the usage may correct.
	live         bool
	keptAlive    time.Time // the last KeepAlive while not live
	pending      []pendingDelivery
	pendingBuf   [2]pendingDelivery // pending's storage while live
	recorded     int64
	lastRecorded time.Time
	firstContent time.Time
	lastContent  time.Time
	end          time.Time // FINISHED's time

	stall *stallDetector // the proxy's; nil in the middleware

	capture  bool
	input    []otelstats.Message
	inputCut bool // input is the prompt's head only
	output   outputCapture

	trailerKey, trailer string // Server-Timing on a stream (servertiming.go)

	done bool
	// finishing is set just before FINISHED is recorded, when the state is
	// final: a finish hook running on another goroutine (the tracker ended
	// the request itself, by TTL, eviction or Shutdown) must not read it
	// otherwise.
	finishing atomic.Bool
}

func newExchange(cfg *config, op string, arrived time.Time) *exchange {
	ex := &exchange{}
	ex.init(cfg, op, arrived)
	return ex
}

// init readies a zero exchange (one embedded in the proxy's call).
func (ex *exchange) init(cfg *config, op string, arrived time.Time) {
	ex.cfg, ex.op, ex.arrived, ex.prompt, ex.obs = cfg, op, arrived, -1, newObserved()
	ex.holdv.b = cfg.budget
	ex.hold = &ex.holdv
	ex.sse = sseReader{limit: cfg.eventLimit, hold: ex.hold}
	ex.pending = ex.pendingBuf[:0]
}

// begin sets what the request body said, once it is known; waitUsage says
// whether deliveries may wait for a final usage.
func (ex *exchange) begin(q *otelstats.Request, ri requestInfo, parsedAt time.Time, responsesAPI, capture bool) {
	ex.q, ex.ri, ex.sp, ex.parsedAt, ex.capture = q, ri, ri.sampling(), parsedAt, capture
	// The Responses API always ends its stream with the usage.
	ex.live = !(ri.Stream && (ri.IncludeUsage || responsesAPI))
}

// header notes the response's final status and decides how to read its
// body. Informational responses are passed by.
func (ex *exchange) header(code int, h http.Header, at time.Time) {
	if code < 200 {
		return
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.status != 0 {
		return
	}
	ex.status, ex.headerAt = code, at
	ex.mode, ex.zbody.coding = modeOf(h, ex.ri.Stream)
	if code == http.StatusNoContent || code == http.StatusNotModified {
		ex.mode, ex.zbody.coding = modeEmpty, codingNone
	}
	if cl := h.Get("Content-Length"); cl == "" {
		// A stream's: none (ParseInt would allocate its error).
	} else if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
		ex.promised, ex.hasPromised = n, true
	}
	if ex.mode == modeJSON {
		fields := ex.cfg.responseFields
		if ex.capture {
			fields = ex.cfg.responseFieldsCapture
		}
		ex.body = newFieldScanner(fields, ex.hold)
		ex.body.tap, ex.body.tapKey = newChoiceScan(ex.hold), respChoices
	}
	if ex.cfg.serverTiming {
		ex.timingHeader(h, at)
	}
}

// modeOf decides how to read a response body, and its content coding: a
// JSON body compressed with gzip or deflate is read at its end (a stream,
// or another coding, passes unread).
func modeOf(h http.Header, stream bool) (respMode, uint8) {
	coding, known := codingOf(h.Get("Content-Encoding"))
	if !known {
		return modeOpaque, codingNone
	}
	mode := mediaMode(h.Get("Content-Type"), stream)
	if coding != codingNone && mode != modeJSON {
		return modeOpaque, codingNone
	}
	return mode, coding
}

func mediaMode(ct string, stream bool) respMode {
	switch ct { // what servers send, without parsing (which allocates)
	case "text/event-stream", "text/event-stream; charset=utf-8":
		return modeSSE
	case "application/json", "application/json; charset=utf-8":
		return modeJSON
	}
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case mt == "text/event-stream":
		return modeSSE
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return modeJSON
	case (mt == "" || mt == "text/plain") && stream:
		// None, or net/http's sniffed default for a Go server that set
		// none: the SDKs read a stream request's body as SSE anyway.
		return modeSSE
	case mt == "" || mt == "text/plain":
		return modeJSON
	}
	return modeOpaque
}

// wrote sees bytes written to the client, after they were passed on: the
// write began at began and returned at at. Bytes whose write began before
// the client left count as delivered, even when the client, served (a
// response with a Content-Length is read to its end once the bytes are
// flushed), closed its connection before wrote ran.
func (ex *exchange) wrote(began, at time.Time, p []byte, err error) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.done {
		return
	}
	if err != nil && ex.writeErrAt.IsZero() && !handlersSlip(err) {
		ex.writeErrAt = at
	}
	if len(p) > 0 && ex.firstWrite.IsZero() {
		ex.firstWrite = at
	}
	if !ex.writeErrAt.IsZero() || ex.gone.endedBefore(began) {
		return // the client is gone: nothing more is delivered
	}
	ex.lastWrite = at
	ex.bytesOut += int64(len(p))
	switch ex.mode {
	case modeSSE:
		ex.readSSE(p, at)
	case modeJSON:
		if ex.zbody.coding != codingNone {
			ex.zbody.add(p, ex.cfg.eventLimit, ex.hold)
			break
		}
		ex.body.feed(p)
	}
}

// handlersSlip reports a write error that says the handler wrote what
// the response cannot carry (a body after a 204 or 304, bytes past its
// declared Content-Length): the client is still there, and has what the
// response holds.
func handlersSlip(err error) bool {
	return errors.Is(err, http.ErrBodyNotAllowed) || errors.Is(err, http.ErrContentLength)
}

// event reads one SSE event (the sseSink of ex.sse).
func (ex *exchange) event(data []byte, over bool) {
	ex.events++
	if over {
		return
	}
	if isDone(data) {
		ex.obs.sawDone, ex.obs.terminal = true, true
		ex.sse.end() // the SDKs stop reading at [DONE]
		return
	}
	c := &ex.chunk
	if !c.decode(data) {
		return // not JSON: not ours to judge
	}
	ex.observe(c)
	if n := c.contentChoices(); n > 0 {
		ex.deliver(ex.at, n)
	}
	if ex.capture {
		// Also the chunks without content: tool calls, reasoning, the
		// finish reasons.
		ex.output.add(data)
	}
}

func isDone(data []byte) bool {
	for len(data) > 0 && (data[len(data)-1] == ' ' || data[len(data)-1] == '\t') {
		data = data[:len(data)-1]
	}
	for len(data) > 0 && (data[0] == ' ' || data[0] == '\t') {
		data = data[1:]
	}
	return string(data) == "[DONE]"
}

// observe takes what a chunk says; a usage with the prompt's size before
// any output had to be recorded lets INPUT_PROCESSED go in, and what
// waited for it follow.
func (ex *exchange) observe(c *chunkJSON) {
	ex.obs.observe(c)
	if ex.obs.prompt >= 0 && !ex.inputRecorded {
		ex.prompt = ex.obs.prompt
		if !ex.inputDone {
			ex.ensureInput()
			ex.live = true
			ex.flush(true)
		}
	}
}

// deliver notes a content chunk of n choices handed to the client at at.
func (ex *exchange) deliver(at time.Time, n int) {
	ex.chunks++
	if ex.firstContent.IsZero() {
		ex.firstContent = at
	} else if ex.stall != nil {
		ex.stall.gap(at.Sub(ex.lastContent), ex.lastContent, ex.chunks-1)
	}
	ex.lastContent = at
	ex.pending = append(ex.pending, pendingDelivery{off: at.Sub(ex.arrived), w: int32(n)})
	if !ex.live && len(ex.pending) > maxPending {
		ex.live = true
	}
	if ex.live {
		ex.flush(true)
	} else if at.Sub(ex.keptAlive) >= keepAliveEvery {
		// Nothing reaches the tracker until the usage: tell it the
		// stream goes on, or its TTL would end the request as abandoned.
		ex.keptAlive = at
		ex.q.KeepAlive(at)
	}
}

// keepAliveEvery is how often a stream whose deliveries are held tells the
// tracker it is alive: often enough for any TTL worth setting, rarely
// enough to cost nothing.
const keepAliveEvery = 100 * time.Millisecond

// flush records the pending deliveries, each its choices' worth of
// tokens, but the last when keepLast.
func (ex *exchange) flush(keepLast bool) {
	k := len(ex.pending)
	if keepLast {
		k--
	}
	for i := 0; i < k; i++ {
		d := ex.pending[i]
		ex.record(ex.arrived.Add(d.off), int64(d.w))
	}
	if k > 0 {
		ex.pending = ex.pending[:copy(ex.pending, ex.pending[k:])]
	}
}

func (ex *exchange) record(at time.Time, n int64) {
	ex.ensureInput()
	_ = ex.q.Detokenized(at, int(n), 0)
	ex.recorded += n
	ex.lastRecorded = at
}

// settle records the pending deliveries at the end: the usage's output
// tokens (whatever the recorded ones did not carry) spread over them in
// proportion to their choices, each at least one.
func (ex *exchange) settle() {
	n := len(ex.pending)
	if n == 0 {
		return
	}
	if out := ex.obs.output; out >= 0 && out <= ex.recorded {
		// The usage counts no token left for them: text that is no
		// output (a completion's echo of its prompt, max_tokens 0) has
		// no token times (SPEC §2).
		ex.pending = ex.pending[:0]
		return
	}
	var buf [2 * len(ex.pendingBuf)]int
	w := buf[:0]
	if n > len(ex.pendingBuf) {
		w = make([]int, 0, 2*n)
	}
	total := 0
	for _, d := range ex.pending {
		w = append(w, int(d.w))
		total += int(d.w)
	}
	rest := total
	if ex.obs.output >= 0 {
		rest = int(max(ex.obs.output-ex.recorded, int64(n)))
	}
	for i, k := range spread(w[n:n:2*n], w, rest) {
		ex.record(ex.arrived.Add(ex.pending[i].off), int64(k))
	}
	ex.pending = ex.pending[:0]
}

// spread divides total (at least len(w)) over len(w) deliveries: one each,
// and the rest in proportion to w, rounding so that the parts sum to total.
// The parts are appended to dst[:0].
func spread(dst, w []int, total int) []int {
	out := dst[:0]
	sum := 0
	for _, v := range w {
		sum += max(v, 1)
	}
	extra := max(total-len(w), 0)
	cum, given := 0, 0
	for _, v := range w {
		cum += max(v, 1)
		upto := (extra*cum + sum - 1) / sum // ceil
		out = append(out, 1+upto-given)
		given = upto
	}
	return out
}

// ensureInput records INPUT_PROCESSED if the prompt's size is known by the
// time it must be decided, and gives it up otherwise.
func (ex *exchange) ensureInput() {
	if ex.inputDone {
		return
	}
	ex.inputDone = true
	if ex.prompt >= 0 && ex.q.InputProcessed(ex.parsedAt, int(ex.prompt), ex.sp) == nil {
		ex.inputRecorded = true
	}
}

// handlerInput is InputProcessed reported by the handler.
func (ex *exchange) handlerInput(at time.Time, promptTokens int) error {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.readLater() // content already written makes it too late
	if ex.done || ex.inputDone || len(ex.pending) > 0 || ex.recorded > 0 {
		return ErrTooLate
	}
	ex.inputDone = true
	if err := ex.q.InputProcessed(at, promptTokens, ex.sp); err != nil {
		return err
	}
	ex.inputRecorded, ex.prompt, ex.live = true, int64(promptTokens), true
	return nil
}

// outcome is how serving the request ended.
type outcome struct {
	end      time.Time
	gone     time.Time // when the client went away while it was served, or zero
	panicked bool      // the handler panicked (middleware)
	aborted  bool      // copying the upstream's response failed (proxy)
	// upstreamErr is an upstream failure before it answered (proxy).
	upstreamErr   string
	upstreamErrAt time.Time
}

// delivered reports whether the client got every byte of a body whose
// length the response promised.
func (ex *exchange) delivered() bool { return ex.hasPromised && ex.bytesOut >= ex.promised }

// complete reports whether the client got the whole response before it
// left: a stream's end ([DONE], a final Responses API event, or a finish
// reason for every choice), its header for a response with no body, or
// any byte of another response.
func (ex *exchange) complete() bool {
	switch ex.mode {
	case modeSSE:
		return ex.obs.sawDone || ex.obs.terminal || ex.obs.choices.all(ex.choicesAsked())
	case modeEmpty:
		return true
	}
	return ex.bytesOut > 0 // a write that began before the client left
}

// choicesAsked is how many choices a stream has: the request's n for each
// of its prompts (a completion's batch has a choice index per prompt and
// choice); more than the layer tracks, or a batch not read whole, is
// never all.
func (ex *exchange) choicesAsked() int {
	n := int64(1)
	if p := ex.ri.Sampling.N; p != nil && *p > 1 {
		n = min(*p, maxChoices+1)
	}
	switch b := ex.ri.Batch; {
	case b < 0:
		return maxChoices + 1
	case b > 1:
		n *= int64(b)
	}
	return int(min(n, maxChoices+1))
}

// aborted reports whether the client left before it was served: a write
// to it failed (for a stream, before every choice finished), or its
// context ended before the response was complete. A client that left
// with every byte of a body whose length it was told was served: it
// closes as soon as it has the last byte, maybe before the handler
// returns.
func (ex *exchange) aborted(o *outcome) bool {
	switch {
	case !ex.writeErrAt.IsZero():
		return ex.mode != modeSSE || !ex.complete()
	case !o.gone.IsZero():
		return !ex.complete() && !ex.delivered()
	}
	return false
}

// truncated reports a response that ended early without an error from the
// transport: a stream that is not complete (no [DONE], no final event, a
// choice without its finish reason), a JSON body whose object never
// closed (a close-delimited body cut short). A stream whose every choice
// finished is whole without [DONE]: servers that never send it (TGI
// before 2.2) end there, and the SDKs need none.
func (ex *exchange) truncated() bool {
	switch ex.mode {
	case modeSSE:
		return !ex.complete()
	case modeJSON:
		return !ex.body.complete() && !ex.body.bad
	}
	return false
}

// finish records what remains and FINISHED, and returns the update.
func (ex *exchange) finish(o outcome, metrics func(otelstats.Update)) otelstats.Update {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.done {
		return otelstats.Update{}
	}
	if ex.status == 0 && o.upstreamErr == "" {
		ex.status = http.StatusOK // a handler that wrote nothing
	}
	ex.readBodyEnd(&o)
	ex.done = true
	ex.settle()
	ex.ensureInput()
	u := ex.finishUpdate(&o)
	if ex.status < 400 && ex.obs.output > 0 && ex.recorded == 0 {
		// Delivered in one piece, or a stream whose usage counts tokens
		// no chunk showed (a stop token alone, an output the layer does
		// not read as text): counted, with no token times (SPEC §2).
		u.NumOutputTokens = int(ex.obs.output)
	}
	if ex.prompt >= 0 && !ex.inputRecorded {
		u.NumPromptTokens = int(ex.prompt)
	}
	if c := ex.obs.cached; c >= 0 && ex.status < 400 && (ex.prompt < 0 || c <= ex.prompt) {
		// The usage's cached prompt tokens: the engine's own count,
		// when one reports in-process, wins (otelstats).
		_ = ex.q.CachedTokens(int(c))
	}
	if u.FinishReason == ex.obs.reason && u.ErrorType == "" {
		// n > 1: every choice's reason on the root; the request's is
		// the one of the choice that finished last.
		u.FinishReasons = ex.obs.choiceReasons()
	}
	if ex.capture {
		ex.q.RecordMessages(ex.input, ex.output.messages())
		if ex.inputCut {
			ex.cfg.countTruncated(attributes.InputMessages)
		}
	}
	ex.timingTrailer(u.Time)
	if ex.obs.cutID {
		ex.cfg.countTruncated(attributes.ResponseID)
	}
	if ex.obs.cutModel {
		ex.cfg.countTruncated(attributes.ResponseModel)
	}
	if ex.q.SpanContext().IsSampled() { // else the head sampler dropped the trace
		_ = ex.q.SetAttributes(ex.responseAttrs()...)
	}
	ex.end = u.Time
	if metrics != nil {
		metrics(u) // before the request ends: whoever sees it end sees them
	}
	ex.finishing.Store(true)
	_ = ex.q.Record(u)
	ex.sse.release()
	if ex.body != nil {
		ex.body.release()
	}
	ex.hold.close()
	return u
}

// readBodyEnd reads what the end of the response body says.
func (ex *exchange) readBodyEnd(o *outcome) {
	switch ex.mode {
	case modeSSE:
		ex.readLater()
		ex.later.release(ex.hold)
		if ex.sse.pending() && (o.gone.IsZero() || ex.delivered()) && ex.writeErrAt.IsZero() {
			ex.sse.flush(ex) // a last event without its blank line
		}
		if ex.sse.failed && ex.obs.errType == "" {
			ex.obs.errType = ErrorStream
		}
	case modeJSON:
		if ex.zbody.coding != codingNone {
			read := ex.zbody.inflate(ex.body)
			ex.zbody.release(ex.hold)
			if !read {
				ex.mode = modeOpaque // too long to set aside, or not in its coding: unread
				return
			}
		}
		c := &ex.chunk
		c.reset()
		decodeResponseFields(ex.body, c)
		ex.observe(c)
		if ex.capture && ex.status < 400 {
			if raw, _ := ex.body.value(respChoices); len(raw) > 0 {
				ex.output.add(append(append([]byte(`{"choices":`), raw...), '}'))
			}
			if raw, _ := ex.body.value(respOutput); len(raw) > 0 {
				ex.output.addItems(raw)
			}
		}
	}
}

// finishUpdate applies the finish rules (see the package doc).
func (ex *exchange) finishUpdate(o *outcome) otelstats.Update {
	u := otelstats.Update{Kind: otelstats.KindFinished, Time: o.end}
	fail := func(t string) { u.FinishReason, u.ErrorType = otelstats.FinishError, t }
	left := !ex.writeErrAt.IsZero() || !o.gone.IsZero()
	switch {
	case ex.cut != "":
		fail(ex.cut)
	case ex.aborted(o):
		if ex.cfg.closing.Load() {
			// Cut by the server's close, not by the client: as the
			// tracker's Shutdown ends a request it still holds.
			u.FinishReason = otelstats.FinishUnfinished
			break
		}
		u.FinishReason = otelstats.FinishAbort
		at := ex.writeErrAt
		if at.IsZero() || (!o.gone.IsZero() && o.gone.Before(at)) {
			at = o.gone
		}
		if at.Before(ex.lastRecorded) {
			at = ex.lastRecorded
		}
		u.Time = at
	case o.upstreamErr != "":
		fail(o.upstreamErr)
		u.Time = o.upstreamErrAt
	case o.panicked:
		fail(ErrorPanic)
	case ex.status >= 400:
		fail(strconv.Itoa(ex.status))
	case o.aborted && !(ex.complete() && left):
		fail(ErrorUpstream)
	case ex.obs.errType != "":
		fail(ex.obs.errType)
	case ex.truncated():
		fail(ErrorTruncated)
	case ex.obs.reason != "":
		u.FinishReason = ex.obs.reason
	default:
		u.FinishReason = otelstats.FinishStop
	}
	if u.Time.Before(ex.arrived) {
		u.Time = ex.arrived
	}
	return u
}

// responseAttrs are the root's attributes from the response: its status
// and the GenAI response id and model (capped: they come from outside).
func (ex *exchange) responseAttrs() []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 3)
	if ex.status != 0 {
		a = append(a, attributes.HTTPStatusCode.Int(ex.status))
	}
	if ex.obs.respID != "" {
		a = append(a, attributes.ResponseID.String(ex.obs.respID))
	}
	if ex.obs.model != "" {
		a = append(a, attributes.ResponseModel.String(ex.obs.model))
	}
	return a
}
