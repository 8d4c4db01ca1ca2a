package otelstats

import (
	"context"
	"errors"
	"iter"
	"reflect"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/spans"
)

// Chunk is one piece of a streaming engine's output as the engine hands it
// to its caller: the shape of Ollama's llm.CompletionResponse and of the
// token callbacks of LocalAI's backends, reduced to what a trace needs.
//
// The wrappers read only the counts and the finish reason; Text and Data are
// passed through untouched and never recorded.
type Chunk struct {
	// Text is the delivered text.
	Text string
	// Tokens is the number of output tokens in Text. 0 with a non-empty Text
	// counts as 1; 0 with an empty Text is a chunk without output (a prompt
	// report, a final chunk that only carries the finish reason).
	Tokens int
	// PromptTokens, when positive, says that the engine has processed its
	// input and how many tokens the prompt has (Ollama's PromptEvalCount).
	// Reported before the first output it records INPUT_PROCESSED with the
	// call's sampling parameters; reported later (Ollama reports it with the
	// final chunk) it is carried by FINISHED instead.
	PromptTokens int
	// FinishReason, set on the final chunk, is why the engine stopped:
	// "stop", "length", … (Ollama's DoneReason).
	FinishReason string
	// Data carries an engine's own payload (tool calls, logprobs, …).
	Data any
}

// Call describes one engine call to the tracker.
type Call struct {
	// RequestID names the request; a random one is drawn when empty.
	RequestID string
	// Model is required: a call without one is not traced (it still runs).
	Model     string
	Operation string // GenAI operation name; "chat" when empty
	Scope     string
	Sampling  *SamplingParams
}

// StreamEngine is a Go inference engine in iterator form: Stream returns
// the output of one request as a sequence of chunks, ending after the chunk
// that carries the finish reason, or with an error. The sequence stops early
// when its consumer stops ranging over it, and when ctx is cancelled.
type StreamEngine[R any] interface {
	Stream(ctx context.Context, req R) iter.Seq2[Chunk, error]
}

// StreamFunc adapts a function to StreamEngine.
type StreamFunc[R any] func(ctx context.Context, req R) iter.Seq2[Chunk, error]

// Stream calls f.
func (f StreamFunc[R]) Stream(ctx context.Context, req R) iter.Seq2[Chunk, error] { return f(ctx, req) }

// CompletionEngine is a Go inference engine in callback form, the shape of
// Ollama's llm.LlamaServer.Completion: Completion calls fn with each chunk,
// in order and never concurrently, from the goroutine that called it, and
// returns when the request is done. The caller stops it early by cancelling
// ctx.
type CompletionEngine[R any] interface {
	Completion(ctx context.Context, req R, fn func(Chunk)) error
}

// CompletionFunc adapts a function to CompletionEngine.
type CompletionFunc[R any] func(ctx context.Context, req R, fn func(Chunk)) error

// Completion calls f.
func (f CompletionFunc[R]) Completion(ctx context.Context, req R, fn func(Chunk)) error {
	return f(ctx, req, fn)
}

// EngineOption configures WrapStream and WrapCompletion.
type EngineOption interface{ applyEngine(*engineConfig) }

type engineConfig struct {
	errorType func(error) string
	newID     func() string
}

type engineOptionFunc func(*engineConfig)

func (f engineOptionFunc) applyEngine(c *engineConfig) { f(c) }

// WithErrorType sets how an engine error becomes the error.type of a failed
// request; the default is ErrorTypeOf. Keep the result low-cardinality: it
// is a metric attribute.
func WithErrorType(f func(error) string) EngineOption {
	return engineOptionFunc(func(c *engineConfig) {
		if f != nil {
			c.errorType = f
		}
	})
}

// WithRequestIDs sets how request ids are drawn for calls that bring none;
// the default draws 16 random hex digits.
func WithRequestIDs(f func() string) EngineOption {
	return engineOptionFunc(func(c *engineConfig) {
		if f != nil {
			c.newID = f
		}
	})
}

func newEngineConfig(opts []EngineOption) *engineConfig {
	c := &engineConfig{errorType: ErrorTypeOf, newID: NewRequestID}
	for _, o := range opts {
		o.applyEngine(c)
	}
	return c
}

// NewRequestID draws a random request id of 16 hex digits.
func NewRequestID() string { return spans.NewSpanID().String() }

// ErrorTypeOf is the default error.type of an engine error: "timeout" for a
// deadline, "canceled" for a cancellation, else the Go type of the first
// error in err's chain that is not one of the standard library's wrappers
// (fmt.Errorf's %w, errors.Join), e.g. "*net.OpError" — the convention's
// "fully-qualified class name". It is at most MaxNameLength bytes.
func ErrorTypeOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	for e := err; e != nil; {
		var next error
		switch w := e.(type) {
		case interface{ Unwrap() error }:
			next = w.Unwrap()
		case interface{ Unwrap() []error }:
			if es := w.Unwrap(); len(es) > 0 {
				next = es[0]
			}
		}
		if next == nil || !isStdWrapper(e) {
			return truncName(reflect.TypeOf(e).String())
		}
		e = next
	}
	return "_OTHER"
}

// isStdWrapper reports whether e only wraps another error with a message.
func isStdWrapper(e error) bool {
	switch reflect.TypeOf(e).String() {
	case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return true
	}
	return false
}

func truncName(s string) string {
	if len(s) > MaxNameLength {
		return s[:MaxNameLength]
	}
	return s
}

// ContextWithRequest returns ctx carrying q, so code deeper in the call (the
// engine core recording its Steps, a handler reporting its tokenization)
// can find the request it serves.
func ContextWithRequest(ctx context.Context, q *Request) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, requestKey{}, q)
}

// RequestFromContext returns the request ctx carries, or nil. The engine
// wrappers and the HTTP middleware put it there. The nil handle's methods
// record nothing and return an error, so code that may run untraced can
// call them without a check.
func RequestFromContext(ctx context.Context) *Request {
	if ctx == nil {
		return nil
	}
	q, _ := ctx.Value(requestKey{}).(*Request)
	return q
}

type requestKey struct{}

// WrapStream returns a StreamEngine that records each request it serves in
// t. Ranging over the sequence of its Stream:
//
//   - records ARRIVED when the iteration starts (with describe(req)), and
//     calls e.Stream with a ctx that carries the request's root span
//     context (Request.Context) and the request (RequestFromContext), so
//     spans the engine starts join the request's trace;
//   - records INPUT_PROCESSED when a chunk reports PromptTokens before any
//     output, and DETOKENIZED for each chunk with output, timed when the
//     chunk is handed to the consumer;
//   - ends the request when the sequence ends: FINISHED with the engine's
//     finish reason ("stop" when it gave none); "abort" when ctx was
//     cancelled, or when the consumer stopped ranging before any finish
//     reason; "error" with error.type (WithErrorType) when the engine
//     yields an error.
//
// The wrapper yields exactly the engine's chunks and errors, at the moment
// the engine yields them; it records after the consumer took each one. It
// starts no goroutine, so a consumer that stops early leaves none behind
// (the engine's own are the engine's to stop when its yield returns false).
func WrapStream[R any](t *Tracker, e StreamEngine[R], describe func(R) Call, opts ...EngineOption) StreamEngine[R] {
	return &tracedStream[R]{t: t, e: e, describe: describe, cfg: newEngineConfig(opts)}
}

// WrapCompletion is WrapStream for the callback form: ARRIVED when
// Completion is called, DETOKENIZED for each chunk passed to fn (after fn
// returned), and FINISHED when the engine returns: its finish reason, or
// "abort" when ctx is done, or "error" when it returns any other error.
func WrapCompletion[R any](t *Tracker, e CompletionEngine[R], describe func(R) Call, opts ...EngineOption) CompletionEngine[R] {
	return &tracedCompletion[R]{t: t, e: e, describe: describe, cfg: newEngineConfig(opts)}
}

type tracedStream[R any] struct {
	t        *Tracker
	e        StreamEngine[R]
	describe func(R) Call
	cfg      *engineConfig
}

func (w *tracedStream[R]) Stream(ctx context.Context, req R) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) {
		c := startEngineCall(ctx, w.t, w.cfg, w.describe, req)
		normal := false
		defer func() {
			if !normal {
				c.fail(time.Now(), "panic")
			}
		}()
		seq := w.e.Stream(c.ctx, req)
		stopped := false
		if seq != nil {
			for ch, err := range seq {
				at := time.Now()
				more := yield(ch, err)
				if err != nil {
					c.engineError(at, err)
				} else {
					c.chunk(at, &ch)
				}
				if !more {
					stopped = true
					break
				}
			}
		}
		c.end(time.Now(), stopped)
		normal = true
	}
}

type tracedCompletion[R any] struct {
	t        *Tracker
	e        CompletionEngine[R]
	describe func(R) Call
	cfg      *engineConfig
}

func (w *tracedCompletion[R]) Completion(ctx context.Context, req R, fn func(Chunk)) (err error) {
	c := startEngineCall(ctx, w.t, w.cfg, w.describe, req)
	normal := false
	defer func() {
		if !normal {
			c.fail(time.Now(), "panic")
		}
	}()
	err = w.e.Completion(c.ctx, req, func(ch Chunk) {
		at := time.Now()
		fn(ch)
		c.chunk(at, &ch)
	})
	if err != nil {
		c.engineError(time.Now(), err)
	}
	c.end(time.Now(), false)
	normal = true
	return err
}

// engineCall is the frontend side of one wrapped engine call.
type engineCall struct {
	mu     sync.Mutex
	q      *Request
	cfg    *engineConfig
	parent context.Context // the caller's ctx: its cancellation is an abort
	ctx    context.Context // the engine's ctx
	sp     *SamplingParams

	inputDone bool // INPUT_PROCESSED recorded, or too late for it
	prompt    int  // prompt tokens reported after the output began
	reason    string
	ended     bool
}

func startEngineCall[R any](ctx context.Context, t *Tracker, cfg *engineConfig, describe func(R) Call, req R) *engineCall {
	if ctx == nil {
		// A nil ctx is Background: the engine runs, and is traced, as
		// unwrapped it would (and c.parent.Err() needs a ctx).
		ctx = context.Background()
	}
	var call Call
	if describe != nil {
		call = describe(req)
	}
	id := call.RequestID
	if id == "" {
		id = cfg.newID()
	}
	q, err := t.Arrive(ctx, id, Arrival{Time: time.Now(), Model: call.Model, Operation: call.Operation, Scope: call.Scope, FrontendFinishes: true})
	c := &engineCall{q: q, cfg: cfg, parent: ctx, ctx: ctx, sp: call.Sampling}
	if err != nil {
		// Not traced: the engine runs as if unwrapped.
		c.ended = true
		return c
	}
	c.ctx = ContextWithRequest(q.Context(ctx), q)
	return c
}

func (c *engineCall) chunk(at time.Time, ch *Chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	if ch.PromptTokens > 0 {
		if !c.inputDone {
			c.inputDone = true
			_ = c.q.InputProcessed(at, ch.PromptTokens, c.sp)
		} else {
			c.prompt = ch.PromptTokens
		}
	}
	n := ch.Tokens
	if n <= 0 && ch.Text != "" {
		n = 1
	}
	if n > 0 {
		c.inputDone = true
		_ = c.q.Detokenized(at, n, 0)
	}
	if ch.FinishReason != "" {
		c.reason = ch.FinishReason
	}
}

func (c *engineCall) engineError(at time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	if c.parent.Err() != nil {
		c.finish(at, FinishAbort, "")
		return
	}
	c.finish(at, FinishError, c.cfg.errorType(err))
}

func (c *engineCall) fail(at time.Time, errType string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ended {
		c.finish(at, FinishError, errType)
	}
}

// end finishes a call that ended without an error; stopped says the
// consumer stopped ranging.
func (c *engineCall) end(at time.Time, stopped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended:
	case c.reason != "":
		c.finish(at, c.reason, "")
	case stopped || c.parent.Err() != nil:
		c.finish(at, FinishAbort, "")
	default:
		c.finish(at, FinishStop, "")
	}
}

func (c *engineCall) finish(at time.Time, reason, errType string) {
	c.ended = true
	if errType == "" && reason == FinishError {
		errType = "_OTHER"
	}
	_ = c.q.Record(Update{Kind: KindFinished, Time: at, FinishReason: truncName(reason), ErrorType: truncName(errType), NumPromptTokens: c.prompt})
}
