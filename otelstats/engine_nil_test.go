package otelstats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/otelstats"
)

// noPanic runs f and fails the test if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// A caller that passes a nil context (older code, context.TODO's
// predecessor) gets its engine run and traced as with Background: the
// wrapper adds no panic the engine itself would not have.
func TestWrapNilContext(t *testing.T) {
	// A variable, not the literal: the test passes a nil context on
	// purpose, which staticcheck (SA1012) flags as a literal.
	var nilCtx context.Context
	t.Run("stream", func(t *testing.T) {
		h := newEngH(t)
		var engineCtx context.Context
		eng := &script{chunks: textChunks(2), onCtx: func(ctx context.Context) { engineCtx = ctx }}
		noPanic(t, "WrapStream.Stream(nil ctx)", func() {
			_, _ = collect(otelstats.WrapStream(h.tr, eng, describe).Stream(nilCtx, toyReq{Model: "m"}))
		})
		if t.Failed() {
			return
		}
		if s := h.only(); s.FinishReason != "length" || s.NumOutputTokens != 2 {
			t.Errorf("finish %q, %d tokens", s.FinishReason, s.NumOutputTokens)
		}
		if engineCtx == nil || otelstats.RequestFromContext(engineCtx) == nil {
			t.Error("the engine's ctx lacks the request")
		}
	})
	t.Run("completion", func(t *testing.T) {
		h := newEngH(t)
		eng := &script{chunks: textChunks(2)}
		noPanic(t, "WrapCompletion.Completion(nil ctx)", func() {
			_ = otelstats.WrapCompletion(h.tr, eng, describe).Completion(nilCtx, toyReq{Model: "m"}, func(otelstats.Chunk) {})
		})
		if t.Failed() {
			return
		}
		if s := h.only(); s.FinishReason != "length" || s.NumOutputTokens != 2 {
			t.Errorf("finish %q, %d tokens", s.FinishReason, s.NumOutputTokens)
		}
	})
	t.Run("Request.Context", func(t *testing.T) {
		h := newEngH(t)
		q, err := h.tr.Arrive(context.Background(), "r", otelstats.Arrival{Time: time.Now(), Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		noPanic(t, "Request.Context(nil)", func() {
			if ctx := q.Context(nilCtx); ctx == nil {
				t.Error("nil ctx returned")
			}
			if otelstats.RequestFromContext(otelstats.ContextWithRequest(nilCtx, q)) != q {
				t.Error("ContextWithRequest(nil, q) lost q")
			}
		})
		_ = q.Finish(time.Now(), "stop")
	})
}

// RequestFromContext returns nil when ctx carries no request (an untraced
// call, a path the middleware does not trace). Engine code that records
// through it without a check gets an error, as from the handle of a
// rejected arrival, not a nil-pointer panic that takes the request down
// (SPEC §1: never a panic).
func TestNilRequestHandle(t *testing.T) {
	q := otelstats.RequestFromContext(context.Background())
	if q != nil {
		t.Fatalf("RequestFromContext(Background) = %v, want nil", q)
	}
	now := time.Now()
	for name, f := range map[string]func() error{
		"Detokenized":    func() error { return q.Detokenized(now, 1, 0) },
		"InputProcessed": func() error { return q.InputProcessed(now, 3, nil) },
		"Finish":         func() error { return q.Finish(now, "stop") },
		"Abort":          func() error { return q.Abort(now) },
		"Fail":           func() error { return q.Fail(now, "x") },
		"Record": func() error {
			return q.Record(otelstats.Update{Kind: otelstats.KindDetokenized, Time: now, NumNewTokens: 1})
		},
		"CachedTokens":  func() error { return q.CachedTokens(1) },
		"SetAttributes": func() error { return q.SetAttributes(attribute.String("k", "v")) },
		"RoutedPD":      func() error { return q.RoutedPD(now, now, now) },
	} {
		noPanic(t, name, func() {
			if err := f(); err == nil {
				t.Errorf("%s on a nil handle returned nil", name)
			}
		})
	}
	noPanic(t, "accessors", func() {
		if q.ID() != "" || q.SpanContext().IsValid() {
			t.Error("a nil handle has an id or a span context")
		}
		ctx := context.Background()
		if q.Context(ctx) != ctx {
			t.Error("Context on a nil handle changed ctx")
		}
		if _, ok := q.Progress(now); ok {
			t.Error("Progress on a nil handle is ok")
		}
		q.KeepAlive(now)
	})
	// A zero handle says the same as a nil one.
	if err := (&otelstats.Request{}).Detokenized(now, 1, 0); err == nil || !errors.Is(err, q.Finish(now, "stop")) {
		t.Errorf("zero handle: %v; nil handle: %v", err, q.Finish(now, "stop"))
	}
}
