package otelhttpmw

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// maxPending bounds the deliveries held while the prompt's size may still
// arrive with the final usage (stream_options.include_usage): 4,096
// timestamps. Past it the middleware stops waiting and records live.
const maxPending = 4096

// respMode is how the middleware reads a response body.
type respMode uint8

const (
	modeUnknown respMode = iota
	modeSSE              // text/event-stream: each content event is a delivery
	modeJSON             // a JSON body read at the end (up to the peek limit)
	modeOpaque           // compressed, or not ours to read
)

// reqTrace is the frontend side of one traced HTTP request. Its methods are
// called by the handler's goroutine (writes), by the handler's helpers
// (InputProcessed) and at the end by ServeHTTP, under mu.
type reqTrace struct {
	mu       sync.Mutex
	q        *otelstats.Request
	sp       *otelstats.SamplingParams
	parsedAt time.Time
	reqCtx   context.Context
	stream   bool // the request asked for a stream
	limit    int

	status int
	mode   respMode

	// Input processing: recorded with the prompt's size, once known; given
	// up on (inputDone without inputRecorded) when output must be recorded
	// first.
	inputDone     bool
	inputRecorded bool
	prompt        int64 // -1 while unknown
	completion    int64 // -1 while unknown

	// Deliveries not yet recorded: all of them while waiting for the final
	// usage, else the last one only, whose token count the final usage may
	// still correct.
	live         bool
	pending      []time.Time
	recorded     int64 // tokens recorded
	lastRecorded time.Time
	firstWrite   time.Time
	writeErrAt   time.Time

	events int // SSE events with data
	chunks int // of which content chunks (deliveries)

	reason    string
	errType   string
	sawDone   bool // data: [DONE]
	sawFinish bool // a finish reason, or a final Responses event
	done      bool

	// SSE parsing.
	line     []byte
	lineOver bool
	lastCR   bool
	data     []byte
	hasData  bool
	dataOver bool

	// Non-stream body.
	body     []byte
	bodyOver bool

	// Content, only when the tracker captures it (content.go).
	capture bool
	input   string
	output  strings.Builder
}

func newReqTrace(q *otelstats.Request, ri *requestInfo, expectUsage bool, parsedAt time.Time, reqCtx context.Context, limit int) *reqTrace {
	return &reqTrace{
		q: q, sp: ri.sampling(), parsedAt: parsedAt, reqCtx: reqCtx, stream: ri.Stream, limit: limit,
		prompt: -1, completion: -1, live: !expectUsage,
	}
}

// header notes the response's final status and decides how to read its
// body.
func (s *reqTrace) header(code int, h http.Header) {
	if code < 200 {
		return // informational
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != 0 {
		return
	}
	s.status = code
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		s.mode = modeOpaque
		return
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case mt == "text/event-stream":
		s.mode = modeSSE
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		s.mode = modeJSON
	case mt == "" && s.stream:
		s.mode = modeSSE
	case mt == "":
		s.mode = modeJSON
	default:
		s.mode = modeOpaque
	}
}

// wrote sees bytes the handler wrote, after they were passed on.
func (s *reqTrace) wrote(at time.Time, p []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if err != nil && s.writeErrAt.IsZero() {
		s.writeErrAt = at
	}
	if len(p) > 0 && s.firstWrite.IsZero() {
		s.firstWrite = at
	}
	if !s.writeErrAt.IsZero() || s.reqCtx.Err() != nil {
		return // the client is gone: nothing more is delivered
	}
	switch s.mode {
	case modeSSE:
		s.feedSSE(at, p)
	case modeJSON:
		if s.bodyOver {
			return
		}
		if len(s.body)+len(p) > s.limit {
			s.bodyOver, s.body = true, nil
			return
		}
		s.body = append(s.body, p...)
	}
}

// feedSSE splits p into lines (LF, CRLF or CR, as the SSE spec allows) and
// dispatches an event at each blank line.
func (s *reqTrace) feedSSE(at time.Time, p []byte) {
	for len(p) > 0 {
		if s.lastCR {
			s.lastCR = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.appendLine(p)
			return
		}
		s.appendLine(p[:i])
		s.lastCR = p[i] == '\r'
		p = p[i+1:]
		s.endLine(at)
	}
}

func (s *reqTrace) appendLine(b []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(b) > s.limit {
		s.lineOver, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

func (s *reqTrace) endLine(at time.Time) {
	line, over := s.line, s.lineOver
	s.line, s.lineOver = s.line[:0], false
	switch {
	case over:
		s.dataOver = true // a line too long spoils its event
	case len(line) == 0:
		s.dispatch(at)
	case line[0] == ':': // comment
	default:
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			return // event, id, retry: the data says all we need
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.hasData = true
		if len(s.data)+len(value) > s.limit {
			s.dataOver = true
			return
		}
		s.data = append(s.data, value...)
	}
}

func (s *reqTrace) dispatch(at time.Time) {
	if s.hasData && !s.dataOver {
		s.event(at, s.data)
	}
	s.data, s.hasData, s.dataOver = s.data[:0], false, false
}

func (s *reqTrace) event(at time.Time, data []byte) {
	s.events++
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		s.sawDone = true
		return
	}
	var ev chunkJSON
	if json.Unmarshal(data, &ev) != nil {
		return // not JSON: not ours to judge
	}
	s.observe(&ev)
	if ev.hasContent() {
		s.deliver(at)
		if s.capture {
			appendOutput(&s.output, data)
		}
	}
}

// chunkJSON is the part of a chat/completions chunk, a Responses API event,
// or a whole non-stream response that the middleware reads.
type chunkJSON struct {
	Object  string       `json:"object"`
	Type    string       `json:"type"` // Responses API events
	Delta   rawJSON      `json:"delta"`
	Code    rawJSON      `json:"code"`
	Choices []choiceJSON `json:"choices"`
	Usage   *usageJSON   `json:"usage"`
	Error   rawJSON      `json:"error"`
	// Responses API: the response of response.completed & co, or the
	// top-level fields of a non-stream response.
	Response          *responseJSON `json:"response"`
	Status            string        `json:"status"`
	IncompleteDetails *reasonJSON   `json:"incomplete_details"`
}

type choiceJSON struct {
	Delta        *deltaJSON `json:"delta"`
	Text         rawJSON    `json:"text"`
	FinishReason *string    `json:"finish_reason"`
}

type deltaJSON struct {
	Content          rawJSON `json:"content"`
	ReasoningContent rawJSON `json:"reasoning_content"`
	Reasoning        rawJSON `json:"reasoning"`
	Refusal          rawJSON `json:"refusal"`
	ToolCalls        rawJSON `json:"tool_calls"`
	FunctionCall     rawJSON `json:"function_call"`
}

type responseJSON struct {
	Status            string      `json:"status"`
	IncompleteDetails *reasonJSON `json:"incomplete_details"`
	Error             rawJSON     `json:"error"`
	Usage             *usageJSON  `json:"usage"`
}

type reasonJSON struct {
	Reason string `json:"reason"`
}

type usageJSON struct {
	PromptTokens        *int64       `json:"prompt_tokens"`
	CompletionTokens    *int64       `json:"completion_tokens"`
	InputTokens         *int64       `json:"input_tokens"`
	OutputTokens        *int64       `json:"output_tokens"`
	PromptTokensDetails *detailsJSON `json:"prompt_tokens_details"`
	InputTokensDetails  *detailsJSON `json:"input_tokens_details"`
}

type detailsJSON struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

// rawJSON is a JSON value kept only to ask whether it has content. Unlike
// json.RawMessage it keeps no copy.
type rawJSON uint8

const (
	rawAbsent rawJSON = iota
	rawEmpty          // null, "", [], {}
	rawFull
)

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	switch string(bytes.TrimSpace(b)) {
	case "null", `""`, "[]", "{}":
		*r = rawEmpty
	default:
		*r = rawFull
	}
	return nil
}

func (ev *chunkJSON) hasContent() bool {
	for i := range ev.Choices {
		c := &ev.Choices[i]
		if c.Text == rawFull {
			return true
		}
		if d := c.Delta; d != nil && (d.Content == rawFull || d.ReasoningContent == rawFull || d.Reasoning == rawFull ||
			d.Refusal == rawFull || d.ToolCalls == rawFull || d.FunctionCall == rawFull) {
			return true
		}
	}
	switch ev.Type {
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
		"response.reasoning_summary_text.delta", "response.function_call_arguments.delta":
		return ev.Delta == rawFull
	}
	return false
}

// observe takes the finish reason, errors and usage from a chunk, an event
// or a whole response.
func (s *reqTrace) observe(ev *chunkJSON) {
	if ev.Usage != nil {
		s.usage(ev.Usage)
	}
	for i := range ev.Choices {
		if fr := ev.Choices[i].FinishReason; fr != nil && *fr != "" {
			s.reason, s.sawFinish = clip(*fr, otelstats.MaxNameLength), true
		}
	}
	if ev.Error == rawFull || ev.Object == "error" {
		s.errType = "stream_error"
	}
	resp := ev.Response
	if resp == nil && ev.Object == "response" {
		resp = &responseJSON{Status: ev.Status, IncompleteDetails: ev.IncompleteDetails, Usage: ev.Usage}
	}
	switch ev.Type {
	case "error":
		s.errType = "stream_error"
	case "response.completed", "response.incomplete", "response.failed":
		s.sawFinish = true
	}
	if resp != nil {
		if resp.Usage != nil {
			s.usage(resp.Usage)
		}
		switch resp.Status {
		case "completed":
			s.reason = otelstats.FinishStop
		case "incomplete":
			s.reason = "length"
			if d := resp.IncompleteDetails; d != nil && d.Reason != "" && d.Reason != "max_output_tokens" {
				s.reason = clip(d.Reason, otelstats.MaxNameLength)
			}
		case "failed":
			s.errType = "response_failed"
		}
	}
}

func (s *reqTrace) usage(u *usageJSON) {
	p, c := u.PromptTokens, u.CompletionTokens
	if p == nil {
		p = u.InputTokens
	}
	if c == nil {
		c = u.OutputTokens
	}
	if c != nil && *c >= 0 && *c <= otelstats.MaxTokenCount {
		s.completion = *c
	}
	if p != nil && *p >= 0 && *p <= otelstats.MaxTokenCount && !s.inputRecorded {
		s.prompt = *p
		if !s.inputDone {
			// The prompt's size came before the output had to be
			// recorded: INPUT_PROCESSED can go in, and what waited for it
			// can follow.
			s.ensureInput()
			s.live = true
			s.flush(true)
		}
	}
}

// deliver notes one content chunk handed to the client at at.
func (s *reqTrace) deliver(at time.Time) {
	s.chunks++
	s.pending = append(s.pending, at)
	if !s.live && len(s.pending) > maxPending {
		s.live = true
	}
	if s.live {
		s.flush(true)
	}
}

// flush records the pending deliveries, one token each, but the last when
// keepLast.
func (s *reqTrace) flush(keepLast bool) {
	k := len(s.pending)
	if keepLast {
		k--
	}
	for i := 0; i < k; i++ {
		s.record(s.pending[i], 1)
	}
	if k > 0 {
		s.pending = s.pending[:copy(s.pending, s.pending[k:])]
	}
}

func (s *reqTrace) record(at time.Time, n int64) {
	s.ensureInput()
	_ = s.q.Detokenized(at, int(n), 0)
	s.recorded += n
	s.lastRecorded = at
}

// ensureInput records INPUT_PROCESSED if the prompt's size is known by the
// time it must be decided, and gives it up otherwise.
func (s *reqTrace) ensureInput() {
	if s.inputDone {
		return
	}
	s.inputDone = true
	if s.prompt >= 0 {
		if s.q.InputProcessed(s.parsedAt, int(s.prompt), s.sp) == nil {
			s.inputRecorded = true
		}
	}
}

// handlerInput is InputProcessed reported by the handler.
func (s *reqTrace) handlerInput(at time.Time, promptTokens int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.inputDone || len(s.pending) > 0 || s.recorded > 0 {
		return ErrTooLate
	}
	s.inputDone = true
	if err := s.q.InputProcessed(at, promptTokens, s.sp); err != nil {
		return err
	}
	s.inputRecorded, s.prompt, s.live = true, int64(promptTokens), true
	return nil
}

// outcome is how the handler's call ended.
type outcome struct {
	end          time.Time
	panicked     bool
	disconnected time.Time // when the request's ctx was cancelled, or zero
}

// finish records what remains and FINISHED.
func (s *reqTrace) finish(o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	if s.status == 0 {
		s.status = http.StatusOK // a handler that wrote nothing
	}
	switch s.mode {
	case modeSSE:
		if s.hasData && !s.dataOver && o.disconnected.IsZero() && s.writeErrAt.IsZero() {
			s.dispatch(o.end) // a last event without its blank line
		}
	case modeJSON:
		if len(s.body) > 0 && !s.bodyOver {
			var ev chunkJSON
			if json.Unmarshal(s.body, &ev) == nil {
				s.observe(&ev)
				if s.capture {
					appendOutput(&s.output, s.body)
				}
				if s.completion > 0 && s.status < 400 {
					s.pending = append(s.pending, s.firstWrite)
				}
			}
		}
	}
	s.done = true

	// What was delivered, the last delivery carrying whatever the usage
	// says the others did not.
	if n := len(s.pending); n > 0 {
		s.flush(true)
		last := int64(1)
		if s.completion >= 0 {
			last = max(1, s.completion-s.recorded)
		}
		s.record(s.pending[0], last)
		s.pending = s.pending[:0]
	}
	s.ensureInput()

	complete := s.sawDone || s.sawFinish
	if s.mode != modeSSE {
		complete = !s.firstWrite.IsZero() && (o.disconnected.IsZero() || s.firstWrite.Before(o.disconnected))
	}
	u := otelstats.Update{Kind: otelstats.KindFinished, Time: o.end}
	switch {
	case !s.writeErrAt.IsZero() || (!o.disconnected.IsZero() && !complete):
		u.FinishReason = otelstats.FinishAbort
		at := s.writeErrAt
		if at.IsZero() || (!o.disconnected.IsZero() && o.disconnected.Before(at)) {
			at = o.disconnected
		}
		if at.Before(s.lastRecorded) {
			at = s.lastRecorded
		}
		u.Time = at
	case o.panicked:
		u.FinishReason, u.ErrorType = otelstats.FinishError, "panic"
	case s.status >= 400:
		u.FinishReason, u.ErrorType = otelstats.FinishError, strconv.Itoa(s.status)
	case s.errType != "":
		u.FinishReason, u.ErrorType = otelstats.FinishError, s.errType
	case s.reason != "":
		u.FinishReason = s.reason
	default:
		u.FinishReason = otelstats.FinishStop
	}
	if s.prompt >= 0 && !s.inputRecorded {
		u.NumPromptTokens = int(s.prompt)
	}
	if s.capture {
		s.q.RecordContent(s.input, s.output.String())
	}
	_ = s.q.Record(u)
}

// respWriter passes everything through to the handler's ResponseWriter and
// shows the middleware what was written.
type respWriter struct {
	http.ResponseWriter
	st *reqTrace
}

func (w *respWriter) WriteHeader(code int) {
	w.st.header(code, w.Header())
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(p []byte) (int, error) {
	at := time.Now()
	w.st.header(http.StatusOK, w.Header())
	n, err := w.ResponseWriter.Write(p)
	w.st.wrote(at, p[:n], err)
	return n, err
}

// Flush flushes the underlying writer, through http.ResponseController so
// that wrappers between us and the connection are honoured; a writer that
// cannot flush makes it a no-op, as otelhttp does.
func (w *respWriter) Flush() {
	w.st.header(http.StatusOK, w.Header())
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// Hijack, EnableFullDuplex).
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
