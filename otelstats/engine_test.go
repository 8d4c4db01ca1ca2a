package otelstats_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// engH records what a tracker emits, through public API only.
type engH struct {
	t      *testing.T
	tp     *sdktrace.TracerProvider
	rec    *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tr     *otelstats.Tracker
	mu     sync.Mutex
	stats  []otelstats.RequestStats
}

func newEngH(t *testing.T) *engH {
	t.Helper()
	h := &engH{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	tr, err := otelstats.NewTracker(
		otelstats.WithTracerProvider(h.tp), otelstats.WithMeterProvider(mp),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			h.mu.Lock()
			h.stats = append(h.stats, *s)
			h.mu.Unlock()
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	h.tr = tr
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return h
}

func (h *engH) only() otelstats.RequestStats {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.stats) != 1 {
		h.t.Fatalf("finished requests = %d, want 1", len(h.stats))
	}
	return h.stats[0]
}

func (h *engH) spanNames() []string {
	var out []string
	for _, s := range h.rec.Ended() {
		out = append(out, s.Name())
	}
	slices.Sort(out)
	return out
}

func (h *engH) span(name string) sdktrace.ReadOnlySpan {
	h.t.Helper()
	for _, s := range h.rec.Ended() {
		if s.Name() == name {
			return s
		}
	}
	h.t.Fatalf("no span %q among %v", name, h.spanNames())
	return nil
}

func (h *engH) requests(reason string) int64 {
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != attributes.MetricRequests {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := p.Attributes.Value(attributes.FinishReason); ok && v.AsString() == reason {
					n += p.Value
				}
			}
		}
	}
	return n
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// toyReq is an engine's own request type.
type toyReq struct {
	Model  string
	Prompt string
	Temp   float64
}

func describe(r toyReq) otelstats.Call {
	temp := r.Temp
	return otelstats.Call{Model: r.Model, Sampling: &otelstats.SamplingParams{Temperature: &temp}}
}

// script is what a toy engine yields, with a pause before each chunk.
type script struct {
	chunks []otelstats.Chunk
	err    error // yielded after the chunks
	pause  time.Duration
	// onCtx sees the ctx the engine was called with.
	onCtx func(context.Context)
}

func (s *script) Stream(ctx context.Context, _ toyReq) iter.Seq2[otelstats.Chunk, error] {
	if s.onCtx != nil {
		s.onCtx(ctx)
	}
	return func(yield func(otelstats.Chunk, error) bool) {
		for _, c := range s.chunks {
			select {
			case <-ctx.Done():
				yield(otelstats.Chunk{}, ctx.Err())
				return
			case <-time.After(s.pause):
			}
			if !yield(c, nil) {
				return
			}
		}
		if s.err != nil {
			yield(otelstats.Chunk{}, s.err)
		}
	}
}

func (s *script) Completion(ctx context.Context, _ toyReq, fn func(otelstats.Chunk)) error {
	if s.onCtx != nil {
		s.onCtx(ctx)
	}
	for _, c := range s.chunks {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.pause):
		}
		fn(c)
	}
	return s.err
}

func textChunks(n int) []otelstats.Chunk {
	out := []otelstats.Chunk{{PromptTokens: 12}}
	for i := range n {
		out = append(out, otelstats.Chunk{Text: fmt.Sprintf("tok%d ", i), Tokens: 1, Data: i})
	}
	out[len(out)-1].FinishReason = "length"
	return out
}

func collect(seq iter.Seq2[otelstats.Chunk, error]) (cs []otelstats.Chunk, errs []error) {
	for c, err := range seq {
		cs = append(cs, c)
		errs = append(errs, err)
	}
	return cs, errs
}

func TestWrapStreamRecordsTheLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newEngH(t)
	eng := &script{chunks: textChunks(5), pause: 3 * time.Millisecond}
	var engineCtx context.Context
	eng.onCtx = func(ctx context.Context) { engineCtx = ctx }

	bare, _ := collect(eng.Stream(context.Background(), toyReq{}))
	start := time.Now()
	got, errs := collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "toy", Temp: 0.5}))
	if !reflect.DeepEqual(got, bare) {
		t.Fatalf("wrapped stream yielded %v, want the engine's %v", got, bare)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("unexpected error %v", err)
		}
	}

	s := h.only()
	if s.FinishReason != "length" || s.ErrorType != "" {
		t.Errorf("finish = %q/%q, want length", s.FinishReason, s.ErrorType)
	}
	if s.NumOutputTokens != 5 || !s.NumPromptTokens.Valid || s.NumPromptTokens.N != 12 {
		t.Errorf("tokens = %d out, %+v prompt; want 5, 12", s.NumOutputTokens, s.NumPromptTokens)
	}
	// Prompt report after 1 pause, first text after 2.
	if !s.FirstTokenLatency.Valid || s.FirstTokenLatency.Value < 6*time.Millisecond || s.FirstTokenLatency.Value > time.Since(start) {
		t.Errorf("TTFT = %+v, want ≥ 6ms", s.FirstTokenLatency)
	}
	if !s.TimePerOutputToken.Valid {
		t.Error("TPOT absent")
	}

	want := []string{"chat toy", attributes.SpanDetokenize, attributes.SpanInputProcessing}
	if names := h.spanNames(); !slices.Equal(names, want) {
		t.Errorf("spans = %v, want %v", names, want)
	}
	root := h.span("chat toy")
	if v, ok := attr(root, attributes.RequestTemperature); !ok || v.AsFloat64() != 0.5 {
		t.Errorf("temperature = %v, %v", v, ok)
	}
	if root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root kind %v", root.SpanKind())
	}
	if d := h.span(attributes.SpanDetokenize); d.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Error("detokenize span is not the root's child")
	}

	// The engine ran with the root's span context and the request.
	if sc := trace.SpanContextFromContext(engineCtx); sc.TraceID() != root.SpanContext().TraceID() || sc.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("engine ctx span context %v, root %v", sc, root.SpanContext())
	}
	if q := otelstats.RequestFromContext(engineCtx); q == nil || q.ID() != s.RequestID {
		t.Errorf("RequestFromContext = %v", q)
	}
	if n := h.requests("length"); n != 1 {
		t.Errorf("llm.server.requests{length} = %d", n)
	}
}

func TestWrapStreamEngineSpansJoinTheTrace(t *testing.T) {
	h := newEngH(t)
	eng := otelstats.StreamFunc[toyReq](func(ctx context.Context, r toyReq) iter.Seq2[otelstats.Chunk, error] {
		_, sp := h.tp.Tracer("engine").Start(ctx, "engine.generate")
		return func(yield func(otelstats.Chunk, error) bool) {
			defer sp.End()
			yield(otelstats.Chunk{Text: "hi", FinishReason: "stop"}, nil)
		}
	})
	_, _ = collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}))
	root, child := h.span("chat m"), h.span("engine.generate")
	if child.SpanContext().TraceID() != root.SpanContext().TraceID() || child.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("engine span %v / parent %v is not under root %v", child.SpanContext(), child.Parent(), root.SpanContext())
	}
	if s := h.only(); s.NumOutputTokens != 1 || s.FinishReason != "stop" {
		t.Errorf("stats %+v", s)
	}
}

func TestWrapStreamConsumerStopsEarly(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newEngH(t)
	// An engine that produces on its own goroutine and stops it when its
	// consumer goes away, as a well-behaved engine does.
	eng := otelstats.StreamFunc[toyReq](func(ctx context.Context, r toyReq) iter.Seq2[otelstats.Chunk, error] {
		return func(yield func(otelstats.Chunk, error) bool) {
			ctx, cancel := context.WithCancel(ctx)
			ch := make(chan otelstats.Chunk)
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer close(ch)
				for i := 0; ; i++ {
					select {
					case ch <- otelstats.Chunk{Text: "x", Tokens: 2}:
					case <-ctx.Done():
						return
					}
				}
			}()
			defer func() { cancel(); <-done }()
			for c := range ch {
				if !yield(c, nil) {
					return
				}
			}
		}
	})
	n := 0
	for range otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}) {
		if n++; n == 3 {
			break
		}
	}
	s := h.only()
	if s.FinishReason != otelstats.FinishAbort || s.NumOutputTokens != 6 {
		t.Errorf("finish %q, %d tokens; want abort with the 6 delivered", s.FinishReason, s.NumOutputTokens)
	}
	root := h.span("chat m")
	if v, _ := attr(root, attributes.ErrorType); v.AsString() != "abort" {
		t.Errorf("error.type = %v", v)
	}
	if h.requests("abort") != 1 {
		t.Error("abort not counted")
	}
}

func TestWrapStreamStopAfterFinishReasonIsNotAnAbort(t *testing.T) {
	h := newEngH(t)
	eng := &script{chunks: []otelstats.Chunk{{Text: "a"}, {Text: "b", FinishReason: "stop"}, {Text: "never"}}}
	for c := range otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}) {
		if c.FinishReason != "" {
			break
		}
	}
	if s := h.only(); s.FinishReason != "stop" || s.NumOutputTokens != 2 {
		t.Errorf("stats %q %d", s.FinishReason, s.NumOutputTokens)
	}
}

func TestWrapStreamCancelIsAbort(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := newEngH(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng := &script{chunks: textChunks(50), pause: time.Millisecond}
	var last error
	n := 0
	for _, err := range otelstats.WrapStream(h.tr, eng, describe).Stream(ctx, toyReq{Model: "m"}) {
		if n++; n == 4 {
			cancel()
		}
		last = err
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("consumer saw %v, want the engine's context.Canceled", last)
	}
	s := h.only()
	if s.FinishReason != otelstats.FinishAbort || s.ErrorType != "abort" {
		t.Errorf("finish %q/%q, want abort", s.FinishReason, s.ErrorType)
	}
	if s.NumOutputTokens != 3 || !s.FirstTokenLatency.Valid {
		t.Errorf("partial: %d tokens, TTFT %+v", s.NumOutputTokens, s.FirstTokenLatency)
	}
	if !slices.Contains(h.spanNames(), attributes.SpanDetokenize) {
		t.Error("no partial detokenize span")
	}
}

type engineFault struct{ code int }

func (e *engineFault) Error() string { return fmt.Sprintf("engine fault %d", e.code) }

func TestWrapStreamEngineErrorIsError(t *testing.T) {
	h := newEngH(t)
	fault := fmt.Errorf("decode step: %w", &engineFault{7})
	eng := &script{chunks: []otelstats.Chunk{{Text: "a"}}, err: fault}
	_, errs := collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}))
	if len(errs) != 2 || errs[1] != fault {
		t.Fatalf("errors %v, want the engine's error passed through", errs)
	}
	s := h.only()
	if s.FinishReason != otelstats.FinishError || s.ErrorType != "*otelstats_test.engineFault" {
		t.Errorf("finish %q, error.type %q", s.FinishReason, s.ErrorType)
	}
	if h.requests("error") != 1 {
		t.Error("error not counted")
	}
}

func TestWrapStreamErrorClassifier(t *testing.T) {
	h := newEngH(t)
	eng := &script{err: io.ErrUnexpectedEOF}
	w := otelstats.WrapStream(h.tr, eng, describe, otelstats.WithErrorType(func(err error) string {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return "engine_crashed"
		}
		return "other"
	}), otelstats.WithRequestIDs(func() string { return "fixed-id" }))
	_, _ = collect(w.Stream(context.Background(), toyReq{Model: "m"}))
	if s := h.only(); s.ErrorType != "engine_crashed" || s.RequestID != "fixed-id" {
		t.Errorf("error.type %q id %q", s.ErrorType, s.RequestID)
	}
}

func TestWrapStreamPromptReportedLast(t *testing.T) {
	// Ollama reports the prompt's size with its final chunk: it cannot be
	// INPUT_PROCESSED any more, FINISHED carries it.
	h := newEngH(t)
	eng := &script{chunks: []otelstats.Chunk{{Text: "a"}, {Text: "b"}, {PromptTokens: 40, FinishReason: "stop"}}}
	_, _ = collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}))
	s := h.only()
	if !s.NumPromptTokens.Valid || s.NumPromptTokens.N != 40 || s.NumOutputTokens != 2 {
		t.Errorf("prompt %+v output %d", s.NumPromptTokens, s.NumOutputTokens)
	}
	if slices.Contains(h.spanNames(), attributes.SpanInputProcessing) {
		t.Error("input processing span without an INPUT_PROCESSED")
	}
}

func TestWrapStreamUntracedCallStillRuns(t *testing.T) {
	h := newEngH(t)
	eng := &script{chunks: textChunks(3)}
	got, _ := collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{ /* no model */ }))
	if len(got) != 4 {
		t.Fatalf("got %d chunks", len(got))
	}
	if len(h.rec.Ended()) != 0 || len(h.stats) != 0 {
		t.Error("a call without a model was traced")
	}
}

func TestWrapStreamEnginePanic(t *testing.T) {
	h := newEngH(t)
	eng := otelstats.StreamFunc[toyReq](func(ctx context.Context, r toyReq) iter.Seq2[otelstats.Chunk, error] {
		return func(yield func(otelstats.Chunk, error) bool) {
			yield(otelstats.Chunk{Text: "a"}, nil)
			panic("boom")
		}
	})
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the engine's panic did not reach the consumer")
			}
		}()
		_, _ = collect(otelstats.WrapStream(h.tr, eng, describe).Stream(context.Background(), toyReq{Model: "m"}))
	}()
	if s := h.only(); s.FinishReason != "error" || s.ErrorType != "panic" {
		t.Errorf("finish %q/%q", s.FinishReason, s.ErrorType)
	}
}

func TestWrapCompletion(t *testing.T) {
	defer goleak.VerifyNone(t)
	t.Run("ok", func(t *testing.T) {
		h := newEngH(t)
		eng := &script{chunks: textChunks(4), pause: 2 * time.Millisecond}
		var engineCtx context.Context
		eng.onCtx = func(ctx context.Context) { engineCtx = ctx }
		var got []otelstats.Chunk
		err := otelstats.WrapCompletion(h.tr, eng, describe).Completion(context.Background(), toyReq{Model: "toy"}, func(c otelstats.Chunk) { got = append(got, c) })
		if err != nil || !reflect.DeepEqual(got, textChunks(4)) {
			t.Fatalf("err %v, chunks %v", err, got)
		}
		s := h.only()
		if s.FinishReason != "length" || s.NumOutputTokens != 4 || s.NumPromptTokens.N != 12 || !s.FirstTokenLatency.Valid {
			t.Errorf("stats %+v", s)
		}
		if otelstats.RequestFromContext(engineCtx) == nil || !trace.SpanContextFromContext(engineCtx).IsValid() {
			t.Error("engine ctx lacks the request")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		h := newEngH(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		eng := &script{chunks: textChunks(40), pause: time.Millisecond}
		n := 0
		err := otelstats.WrapCompletion(h.tr, eng, describe).Completion(ctx, toyReq{Model: "m"}, func(otelstats.Chunk) {
			if n++; n == 3 {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
		if s := h.only(); s.FinishReason != "abort" || s.NumOutputTokens != 2 {
			t.Errorf("finish %q tokens %d", s.FinishReason, s.NumOutputTokens)
		}
	})
	t.Run("error", func(t *testing.T) {
		h := newEngH(t)
		eng := &script{chunks: []otelstats.Chunk{{Text: "a"}}, err: &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}}
		err := otelstats.WrapCompletion(h.tr, eng, describe).Completion(context.Background(), toyReq{Model: "m"}, func(otelstats.Chunk) {})
		if err == nil {
			t.Fatal("error swallowed")
		}
		if s := h.only(); s.FinishReason != "error" || s.ErrorType != "*net.OpError" {
			t.Errorf("finish %q/%q", s.FinishReason, s.ErrorType)
		}
	})
}

func TestErrorTypeOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("x"), "*errors.errorString"},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", &engineFault{})), "*otelstats_test.engineFault"},
		{errors.Join(&engineFault{}, io.EOF), "*otelstats_test.engineFault"},
		{fmt.Errorf("ctx: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{&net.OpError{Err: io.EOF}, "*net.OpError"},
	} {
		if got := otelstats.ErrorTypeOf(c.err); got != c.want {
			t.Errorf("ErrorTypeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// ExampleWrapStream wraps a Go engine that streams tokens, so each call
// becomes a trace and counts in the serving metrics.
func ExampleWrapStream() {
	tracker, _ := otelstats.NewTracker()
	defer tracker.Shutdown(context.Background())

	type genRequest struct{ Model, Prompt string }
	engine := otelstats.StreamFunc[genRequest](func(ctx context.Context, r genRequest) iter.Seq2[otelstats.Chunk, error] {
		return func(yield func(otelstats.Chunk, error) bool) {
			if !yield(otelstats.Chunk{PromptTokens: 3}, nil) { // tokenized
				return
			}
			for i, w := range []string{"Hello", ",", " world"} {
				c := otelstats.Chunk{Text: w, Tokens: 1}
				if i == 2 {
					c.FinishReason = "stop"
				}
				if !yield(c, nil) {
					return
				}
			}
		}
	})
	traced := otelstats.WrapStream(tracker, engine, func(r genRequest) otelstats.Call {
		return otelstats.Call{Model: r.Model, Operation: "text_completion"}
	})
	for c, err := range traced.Stream(context.Background(), genRequest{Model: "toy", Prompt: "Say hi"}) {
		if err != nil {
			break
		}
		fmt.Print(c.Text)
	}
	fmt.Println()
	// Output: Hello, world
}
