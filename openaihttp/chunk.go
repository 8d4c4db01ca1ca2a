package openaihttp

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/llmtrace/llmtrace/internal/textcap"
	"github.com/llmtrace/llmtrace/otelstats"
)

// chunkJSON is what the layer reads of a chat/completions chunk, a
// Responses API event, or a whole response that was not streamed. It is
// decoded once per SSE event, so its fields cost nothing they need not:
// strings are kept as the raw JSON they were in (rawText, no copy),
// content as presence only (rawJSON), and one chunkJSON is reused for all
// of a request's events.
type chunkJSON struct {
	ID      rawText    `json:"id"`
	Model   rawText    `json:"model"`
	Object  rawText    `json:"object"`
	Type    rawText    `json:"type"` // Responses API events
	Delta   rawJSON    `json:"delta"`
	Choices choiceList `json:"choices"`
	Usage   *usageJSON `json:"usage"`
	Error   rawJSON    `json:"error"`
	// Responses API: the response of response.completed & co, or the
	// top-level fields of a non-stream response.
	Response          *responseJSON `json:"response"`
	Status            rawText       `json:"status"`
	IncompleteDetails *reasonJSON   `json:"incomplete_details"`

	store chunkStore // what decode points into
}

type choiceJSON struct {
	Index        choiceIndex `json:"index"`
	Delta        deltaJSON   `json:"delta"`
	Message      deltaJSON   `json:"message"`
	Text         rawJSON     `json:"text"`
	FinishReason rawText     `json:"finish_reason"`
}

// maxChoices bounds the choices whose finish the layer tracks: OpenAI's
// limit on n.
const maxChoices = 128

// maxChunkChoices bounds the choices decoded of one chunk or response:
// every choice of a request within OpenAI's limit on n, and one more that
// the choices past them are decoded into in turn (choiceList).
const maxChunkChoices = maxChoices + 1

// choiceList is a chunk's choices, at most maxChunkChoices of them
// (capped). Decoded in full, a hostile upstream's 1 MiB event of `{}`
// choices took 369,322 elements of 48 bytes, 17 MiB kept for the
// request's life and some 80 MiB allocated per event, outside the body
// budget. No server sends more than OpenAI's n in one chunk.
type choiceList = capped[choiceJSON]

// capped is a JSON array of at most maxChunkChoices elements: past that
// each further element is decoded into the last one in turn, so that the
// last stands. The arrays an upstream sends (choices, a message's tool
// calls) are read through it, so that a small element (`{}`) cannot
// become a much larger decoded one thousands of times over.
type capped[T any] []T

// next returns the element the next one is decoded into, zeroed.
func (l *capped[T]) next() *T {
	var zero T
	if len(*l) < maxChunkChoices {
		*l = append(*l, zero)
	} else {
		(*l)[len(*l)-1] = zero
	}
	return &(*l)[len(*l)-1]
}

// UnmarshalJSON decodes as encoding/json decodes a []T (it has checked
// that b is valid JSON), within the bound: each element with
// encoding/json itself, so that a rawText points into the caller's data.
func (l *capped[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*l = nil
		return nil
	}
	if len(b) < 2 || b[0] != '[' {
		return &json.UnmarshalTypeError{Value: "non-array", Type: reflect.TypeFor[capped[T]]()}
	}
	*l = (*l)[:0]
	for rest := b[1 : len(b)-1]; len(bytes.TrimSpace(rest)) > 0; {
		k := elementEnd(rest)
		if err := json.Unmarshal(rest[:k], l.next()); err != nil {
			return err
		}
		if k < len(rest) {
			k++ // the comma
		}
		rest = rest[k:]
	}
	return nil
}

// elementEnd is the length of the first of b's elements, the inside of a
// valid JSON array: up to the first comma outside strings and containers.
func elementEnd(b []byte) int {
	depth, inStr, esc := 0, false, false
	for i, c := range b {
		switch {
		case esc:
			esc = false
		case inStr:
			esc, inStr = c == '\\', c != '"'
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 0:
			return i
		}
	}
	return len(b)
}

// choiceIndex is a choice's index plus one: 0 when absent or null (a
// server that sends one choice may leave it out), -1 for anything that is
// not an index below maxChoices.
type choiceIndex int16

func (x *choiceIndex) UnmarshalJSON(b []byte) error {
	if *x = 0; string(b) == "null" {
		return nil
	}
	*x = -1
	if len(b) == 0 || len(b) > 3 {
		return nil
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return nil
		}
		v = v*10 + int(c-'0')
	}
	if v < maxChoices {
		*x = choiceIndex(v + 1)
	}
	return nil
}

// get returns the index (0 when absent); ok is false for one not tracked.
func (x choiceIndex) get() (i int, ok bool) {
	if x == 0 {
		return 0, true
	}
	return int(x) - 1, x > 0
}

type deltaJSON struct {
	Content          rawJSON   `json:"content"`
	ReasoningContent rawJSON   `json:"reasoning_content"`
	Reasoning        rawJSON   `json:"reasoning"`
	Refusal          rawJSON   `json:"refusal"`
	ToolCalls        rawJSON   `json:"tool_calls"`
	FunctionCall     rawJSON   `json:"function_call"`
	Audio            audioJSON `json:"audio"`
}

func (d *deltaJSON) full() bool {
	return d.Content == rawFull || d.ReasoningContent == rawFull || d.Reasoning == rawFull ||
		d.Refusal == rawFull || d.ToolCalls == rawFull || d.FunctionCall == rawFull || d.Audio == audioFull
}

// audioJSON is a chat delta's audio (a model that answers in speech, its
// content null): output when it carries data or a transcript, not when it
// carries only its id or its expiry (the first and last audio chunks).
type audioJSON uint8

const audioFull audioJSON = 1

func (a *audioJSON) UnmarshalJSON(b []byte) error {
	*a = 0
	var v struct {
		Data       rawJSON `json:"data"`
		Transcript rawJSON `json:"transcript"`
	}
	if json.Unmarshal(b, &v) == nil && (v.Data == rawFull || v.Transcript == rawFull) {
		*a = audioFull
	}
	return nil // anything else is no audio, not a chunk to drop
}

type responseJSON struct {
	ID                rawText     `json:"id"`
	Model             rawText     `json:"model"`
	Status            rawText     `json:"status"`
	IncompleteDetails *reasonJSON `json:"incomplete_details"`
	Usage             *usageJSON  `json:"usage"`
}

type reasonJSON struct {
	Reason rawText `json:"reason"`
}

type usageJSON struct {
	PromptTokens        *tokenCount  `json:"prompt_tokens"`
	CompletionTokens    *tokenCount  `json:"completion_tokens"`
	InputTokens         *tokenCount  `json:"input_tokens"`
	OutputTokens        *tokenCount  `json:"output_tokens"`
	PromptTokensDetails *detailsJSON `json:"prompt_tokens_details"`
	InputTokensDetails  *detailsJSON `json:"input_tokens_details"`
}

type detailsJSON struct {
	CachedTokens *tokenCount `json:"cached_tokens"`
}

// tokenCount is a usage's token count: an integer, or a number with an
// integral value (12.0, 1.2e1: some servers write counts as floats). Any
// other value — a fraction, a string, a number out of int64 — is -1, a
// count the layer ignores, rather than a type error that would leave the
// whole chunk unread. null leaves the pointer nil.
type tokenCount int64

func (n *tokenCount) UnmarshalJSON(b []byte) error {
	*n = countOf(b)
	return nil
}

// countOf is the tokenCount of a JSON value.
func countOf(b []byte) tokenCount {
	integer, ok := jsonNumber(b)
	switch {
	case !ok:
		return -1
	case integer:
		if v, ok := parseInt64(b); ok {
			return tokenCount(v)
		}
		return -1
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return -1
	}
	return tokenCount(f)
}

// reset readies c for the next event, keeping the choices' storage. It
// zeroes what the last event used, not the whole of c: it runs per event.
func (c *chunkJSON) reset() {
	ch := c.Choices[:cap(c.Choices)]
	clear(ch) // encoding/json decodes into reused elements without zeroing them
	c.ID, c.Model, c.Object, c.Type, c.Status = nil, nil, nil, nil, nil
	c.Delta, c.Error = rawAbsent, rawAbsent
	c.Choices, c.Usage, c.Response, c.IncompleteDetails = ch[:0], nil, nil, nil
	c.store.reset()
}

// rawJSON is a JSON value kept only to ask whether it has content.
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

// rawText is a JSON string kept as its raw bytes, pointing into the event
// being decoded: valid only while it is (encoding/json hands UnmarshalJSON
// a slice of its input). text copies it out; is compares without copying.
type rawText []byte

func (r *rawText) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' {
		*r = b
	} else {
		*r = nil // null, or not a string
	}
	return nil
}

// is reports whether r is the JSON string s (s has no escapes).
func (r rawText) is(s string) bool {
	return len(r) == len(s)+2 && string(r[1:len(r)-1]) == s
}

// text returns the string r holds ("" for none), valid UTF-8 and cut at n
// bytes (on a rune boundary); changed says it was cleaned or cut.
func (r rawText) text(n int) (s string, changed bool) {
	if len(r) < 2 {
		return "", false
	}
	inner := r[1 : len(r)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		if len(inner) > n+utf8.UTFMax {
			inner = inner[:n+utf8.UTFMax] // enough for Clean to cut on a rune boundary
		}
		s, changed = textcap.Clean(string(inner), n)
		return s, changed || len(r)-2 > len(inner)
	}
	if json.Unmarshal(r, &s) != nil {
		return "", false
	}
	return textcap.Clean(s, n)
}

// contentChoices is how many choices of c carry content (a Responses API
// text delta counts one): the tokens a delivery carries at the least. A
// role-only or usage-only chunk has none.
func (c *chunkJSON) contentChoices() int {
	n := 0
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Text == rawFull || ch.Delta.full() || ch.Message.full() {
			n++
		}
	}
	if n > 0 {
		return n
	}
	switch {
	case c.Type.is("response.output_text.delta"), c.Type.is("response.refusal.delta"),
		c.Type.is("response.reasoning_text.delta"), c.Type.is("response.reasoning_summary_text.delta"),
		c.Type.is("response.function_call_arguments.delta"),
		// The inputs the model writes for its other tools (not the
		// tools' outputs, such as shell_call_output_content).
		c.Type.is("response.custom_tool_call_input.delta"), c.Type.is("response.mcp_call_arguments.delta"),
		c.Type.is("response.code_interpreter_call_code.delta"), c.Type.is("response.shell_call_command.delta"):
		if c.Delta == rawFull {
			return 1
		}
	}
	return 0
}

// observed is what a request's chunks or body said about its end.
type observed struct {
	reason   string    // the finish reason, "" if none yet
	errType  string    // stream_error, response_failed
	sawDone  bool      // data: [DONE]
	terminal bool      // the stream's last word: [DONE] or a Responses API final event
	choices  choiceSet // which choices had their finish reason
	prompt   int64     // -1 while unknown
	output   int64     // -1 while unknown
	cached   int64     // -1 while unknown
	// byChoice are the finish reasons by choice index, one past what the
	// tracker keeps (otelstats.MaxChoiceFinishReasons), so that it counts
	// the cut.
	byChoice [otelstats.MaxChoiceFinishReasons + 1]string
	respID   string
	model    string
	cutID    bool // respID was cut at maxResponseID
	cutModel bool // model was cut at otelstats.MaxModelLength
}

func newObserved() observed { return observed{prompt: -1, output: -1, cached: -1} }

// observe takes the finish reason, errors, usage, response id and model
// from a chunk, an event or a whole response.
func (o *observed) observe(c *chunkJSON) {
	if c.Usage != nil {
		o.usage(c.Usage)
	}
	o.ids(c.ID, c.Model)
	for i := range c.Choices {
		ch := &c.Choices[i]
		fr := ch.FinishReason
		finished := len(fr) > 2
		if finished {
			// The tracker caps finish reasons and counts the cut.
			o.reason, _ = fr.text(1 << 10)
			if i, ok := ch.Index.get(); ok && i < len(o.byChoice) {
				o.byChoice[i] = o.reason
			}
		}
		o.choices.see(ch.Index, finished)
	}
	if c.Error == rawFull || c.Object.is("error") || c.Type.is("error") {
		o.errType = ErrorStream
	}
	resp := c.Response
	if resp == nil && c.Object.is("response") {
		resp = &responseJSON{ID: c.ID, Model: c.Model, Status: c.Status, IncompleteDetails: c.IncompleteDetails, Usage: c.Usage}
	}
	if c.Type.is("response.completed") || c.Type.is("response.incomplete") || c.Type.is("response.failed") {
		o.terminal = true
	}
	if resp != nil {
		o.response(resp)
	}
}

func (o *observed) response(r *responseJSON) {
	if r.Usage != nil {
		o.usage(r.Usage)
	}
	o.ids(r.ID, r.Model)
	switch {
	case r.Status.is("completed"):
		o.reason = otelstats.FinishStop
	case r.Status.is("incomplete"):
		o.reason = "length"
		if d := r.IncompleteDetails; d != nil && len(d.Reason) > 2 && !d.Reason.is("max_output_tokens") {
			o.reason, _ = d.Reason.text(1 << 10)
		}
	case r.Status.is("failed"):
		o.errType = ErrorResponseFailed
	}
}

// choiceReasons are the finish reasons of a response's choices in choice
// order (choices without one left out), for FINISHED's FinishReasons: nil
// for a response with one choice.
func (o *observed) choiceReasons() []string {
	if o.choices.seen < 2 {
		return nil
	}
	var out []string
	for _, r := range o.byChoice[:min(o.choices.seen, len(o.byChoice))] {
		if r != "" {
			out = append(out, r)
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// ids takes the first response id and model seen.
func (o *observed) ids(id, model rawText) {
	if o.respID == "" && len(id) > 2 {
		o.respID, o.cutID = id.text(maxResponseID)
	}
	if o.model == "" && len(model) > 2 {
		o.model, o.cutModel = model.text(otelstats.MaxModelLength)
	}
}

func (o *observed) usage(u *usageJSON) {
	p, c := u.PromptTokens, u.CompletionTokens
	if p == nil {
		p = u.InputTokens
	}
	if c == nil {
		c = u.OutputTokens
	}
	sane := func(v *tokenCount) bool { return v != nil && *v >= 0 && *v <= otelstats.MaxTokenCount }
	// No prompt has zero tokens: a usage that says so is a placeholder
	// (Ollama's /v1/completions puts a zero usage on every chunk before
	// the real one). Its prompt count would settle the prompt's size
	// before it is known, and an all-zero one says nothing at all: not
	// that the text delivered so far carried no token.
	zero := func(v *tokenCount) bool { return v == nil || *v == 0 }
	if zero(p) && zero(c) {
		return
	}
	if sane(p) && *p > 0 {
		o.prompt = int64(*p)
	}
	if sane(c) {
		o.output = int64(*c)
	}
	d := u.PromptTokensDetails
	if d == nil {
		d = u.InputTokensDetails
	}
	if d != nil && sane(d.CachedTokens) {
		o.cached = int64(*d.CachedTokens)
	}
}

// maxResponseID caps gen_ai.response.id: servers send 30-odd bytes.
const maxResponseID = 256

// The response body's wanted top-level fields, in fieldSet order.
const (
	respID = iota
	respModel
	respObject
	respStatus
	respChoices
	respUsage
	respError
	respIncomplete
	respOutput // the Responses API's output items: content capture only
)

// newResponseFields is the fieldSet of a non-stream response; the choices
// (which hold the completion) are kept up to limit bytes.
func newResponseFields(limit int) *fieldSet {
	return &fieldSet{
		keys: []string{"id", "model", "object", "status", "choices", "usage", "error", "incomplete_details"},
		caps: []int{4 << 10, capModel, 256, 256, limit, 4 << 10, 64 << 10, 4 << 10},
	}
}

// withOutput is fs with the Responses API's output items kept too, up to
// maxCapture bytes, for content capture.
func withOutput(fs *fieldSet) *fieldSet {
	return &fieldSet{keys: append(slices.Clone(fs.keys), "output"), caps: append(slices.Clone(fs.caps), maxCapture)}
}

// decodeResponseFields fills c from what the scanner kept of a response.
func decodeResponseFields(s *fieldScanner, c *chunkJSON) {
	dec := func(i int, v any) {
		if raw, _ := s.value(i); len(raw) > 0 {
			_ = json.Unmarshal(raw, v)
		}
	}
	dec(respID, &c.ID)
	dec(respModel, &c.Model)
	dec(respObject, &c.Object)
	dec(respStatus, &c.Status)
	dec(respChoices, &c.Choices)
	if _, over := s.value(respChoices); over && s.tap != nil {
		// Longer than the layer keeps: the finish reason read as they
		// went by stands for them.
		if fr := s.tap.reason(); fr != nil {
			c.Choices = append(c.Choices[:0], choiceJSON{FinishReason: fr})
		}
	}
	dec(respUsage, &c.Usage)
	dec(respError, &c.Error)
	dec(respIncomplete, &c.IncompleteDetails)
	if _, over := s.value(respError); over {
		c.Error = rawFull
	}
}
