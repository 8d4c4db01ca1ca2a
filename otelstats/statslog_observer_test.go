package otelstats

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestStatsLogObserverThroughput: a tracker fed by an HTTP observer alone
// (the middleware, the proxy: ARRIVED, INPUT_PROCESSED or the usage's
// prompt count, DETOKENIZED when streamed, FINISHED with the usage's output
// count when not) has no engine PREFILLING or DECODING. Its stats line
// (SPEC §4: prompt and generation throughput, tokens/s) still counts the
// tokens the responses show, as llm.server.prompt_tokens and
// .generation_tokens do, and not the prompt of a request that produced
// nothing. It read 0.0 prompt tokens/s under any load, and 0.0 generation
// tokens/s for responses in one piece.
func TestStatsLogObserverThroughput(t *testing.T) {
	h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second))
	_ = h.tr.RecordSchedulerStats(at(0), SchedulerStats{}) // starts the first interval
	// Streamed: 100 prompt tokens, 3 output tokens in 3 deliveries.
	h.feed([]Update{arrived("s", 10, "m", "chat"), inputProcessed("s", 11, 100),
		detok("s", 50, 1, 0), detok("s", 60, 1, 0), detok("s", 70, 1, 0), feFinished("s", 80, FinishStop)})
	// In one piece: 40 prompt tokens (the usage's, on FINISHED), 30 of
	// them read from the server's cache, 20 output tokens.
	q, err := h.tr.Arrive(context.Background(), "o", Arrival{Time: at(100), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CachedTokens(30); err != nil {
		t.Fatal(err)
	}
	h.must(Update{RequestID: "o", Kind: KindFinished, Side: SideFrontend, Time: at(300), FinishReason: FinishStop,
		NumPromptTokens: 40, NumOutputTokens: 20})
	// Failed before any output: its prompt may never have been computed.
	h.feed([]Update{arrived("f", 400, "m", "chat"), inputProcessed("f", 401, 500), feFinished("f", 450, FinishError)})
	_ = h.tr.RecordSchedulerStats(at(1000), SchedulerStats{})

	s := h.tr.LastStats()
	if s.Interval != time.Second {
		t.Fatalf("no stats line for [0, 1 s]: %+v", s)
	}
	// Prompt: 100 + (40 - 30 cached); generation: 3 + 20.
	if s.PromptThroughput != 110 || s.GenerationThroughput != 23 {
		t.Errorf("prompt %v tokens/s, generation %v tokens/s; want 110 and 23", s.PromptThroughput, s.GenerationThroughput)
	}
	h.wantCounter(attributes.MetricGenerationTokens, 23)
	h.wantCounter(attributes.MetricPromptTokens, 640)
}

// TestStatsLogWithoutSchedulerStats: running, waiting and KV-cache usage
// come from the engine's scheduler stats (SPEC §4); a tracker that never
// got any (an HTTP observer, the proxy, an update log without them) does
// not know them. Its line says n/a and its record has no such attributes,
// as for the hit rate before any request was scheduled — not "Running: 0
// reqs" and "KV cache usage: 0.0%" while requests are in flight (SPEC §2:
// absent, never zero).
func TestStatsLogWithoutSchedulerStats(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, WithStatsLog(slog.New(slog.NewJSONHandler(&logs, nil)), time.Second))
	h.tr.stats.maybeLog(at(0).UnixNano()) // starts the first interval
	h.feed([]Update{arrived("a", 10, "m", "chat"), inputProcessed("a", 11, 100), detok("a", 50, 1, 0)})
	h.tr.stats.maybeLog(at(1000).UnixNano())
	s := h.tr.LastStats()
	if s.Interval != time.Second {
		t.Fatalf("no stats line for [0, 1 s]: %+v", s)
	}
	if s.SchedulerValid {
		t.Error("SchedulerValid without any scheduler stats")
	}
	line := s.String()
	for _, want := range []string{"Running: n/a", "Waiting: n/a", "KV cache usage: n/a"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q: want %q", line, want)
		}
	}
	for _, key := range []string{`"running"`, `"waiting"`, `"kv_cache_usage"`} {
		if strings.Contains(logs.String(), key) {
			t.Errorf("log %q: want no %s", logs.String(), key)
		}
	}

	// Once the engine reports them, they are what it said, 0 included.
	logs.Reset()
	_ = h.tr.RecordSchedulerStats(at(1500), SchedulerStats{Running: 0, Waiting: 2, KVCacheUsage: 0.25})
	_ = h.tr.RecordSchedulerStats(at(2000), SchedulerStats{Running: 0, Waiting: 2, KVCacheUsage: 0.25})
	s = h.tr.LastStats()
	if !s.SchedulerValid || !strings.Contains(s.String(), "Running: 0 reqs, Waiting: 2 reqs") ||
		!strings.Contains(s.String(), "KV cache usage: 25.0%") || !strings.Contains(logs.String(), `"running":0`) {
		t.Errorf("after scheduler stats: %q, log %q", s.String(), logs.String())
	}
}
