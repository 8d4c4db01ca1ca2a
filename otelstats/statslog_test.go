package otelstats

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestStatsLogGenerationTokensCountedOnce: the stats line's generation
// throughput counts each generated token once, whichever side's update
// reaches the tracker first (SPEC §1: updates of the two sides arrive in
// any order; "never a corrupted number"; §4: the periodic log line).
func TestStatsLogGenerationTokensCountedOnce(t *testing.T) {
	orders := []struct{ name, order string }{
		{"in time order", "FFEEEFEFEFEF"},
		{"all deliveries before the engine's first update", "FFFFFEEEEEEF"},
		{"deliveries ahead of the engine's DECODING", "FFEEFFEEFEEF"},
	}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second))
			h.tr.RecordSchedulerStats(at(0), SchedulerStats{}) // starts the first interval
			h.feed(merge(ivFrontend(), ivEngine(), picks(o.order)))
			h.tr.RecordSchedulerStats(at(1000), SchedulerStats{Running: 0})
			s := h.tr.LastStats()
			if s.Interval != time.Second {
				t.Fatalf("no stats line for [0, 1 s]: %+v", s)
			}
			// 3 tokens generated in 1 s. Prompt throughput counts the
			// tokens computed, not served from the cache: 10 - 2 = 8.
			if s.GenerationThroughput != 3 || s.PromptThroughput != 8 {
				t.Errorf("generation %v tokens/s, prompt %v tokens/s; want 3 and 8", s.GenerationThroughput, s.PromptThroughput)
			}
			if s.Finished != 1 {
				t.Errorf("finished %d, want 1", s.Finished)
			}
		})
	}
	t.Run("frontend only", func(t *testing.T) {
		h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second))
		h.tr.RecordSchedulerStats(at(0), SchedulerStats{})
		h.feed(ivFrontend())
		h.tr.RecordSchedulerStats(at(1000), SchedulerStats{})
		if s := h.tr.LastStats(); s.GenerationThroughput != 3 {
			t.Errorf("generation %v tokens/s, want 3 (the frontend's deliveries)", s.GenerationThroughput)
		}
	})
}

// The stats line's edges: a tracker fed only per-request updates logs as
// recorded time passes; the first interval holds only what was recorded
// in it; a transfer a request never completed is not averaged as 0 ms;
// the average keeps its fraction of a millisecond; and the structured
// hit rate is absent, not 0, before any request was scheduled.
func TestStatsLogEdges(t *testing.T) {
	t.Run("per-request updates only", func(t *testing.T) {
		h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second))
		for i := range 5 {
			id, ms := fmt.Sprint("r", i), float64(i)*1000
			h.feed([]Update{arrived(id, ms, "m", "chat"), inputProcessed(id, ms+1, 100), queued(id, ms+2), prefilling(id, ms+3, 100, 0),
				decoding(id, ms+4, 1), detok(id, ms+5, 1, 0), enFinished(id, ms+5, "stop"), feFinished(id, ms+6, "stop")})
		}
		if s := h.tr.LastStats(); s.Interval == 0 {
			t.Error("no stats line over 4 s of recorded time")
		}
	})
	t.Run("first interval", func(t *testing.T) {
		// A tracker whose log starts while tokens are already counted
		// (a live tracker's first tick): the first line holds none of them.
		h := newHarness(t)
		h.feed([]Update{arrived("early", 0, "m", "chat"), inputProcessed("early", 1, 1000), queued("early", 2), prefilling("early", 3, 1000, 0)})
		h.tr.cfg.logger, h.tr.cfg.statsInterval = slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second
		_ = h.tr.RecordSchedulerStats(at(500), SchedulerStats{}) // starts the first interval
		_ = h.tr.RecordSchedulerStats(at(1500), SchedulerStats{})
		if s := h.tr.LastStats(); s.Interval != time.Second || s.PromptThroughput != 0 {
			t.Errorf("interval %v, prompt %v tokens/s; want 1s and 0 (the tokens came before it)", s.Interval, s.PromptThroughput)
		}
	})
	t.Run("kv transfer never completed", func(t *testing.T) {
		var logs bytes.Buffer
		h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Second))
		_ = h.tr.RecordSchedulerStats(at(0), SchedulerStats{})
		h.feed(decodeInstance("ok", "")) // one 10 ms transfer
		h.feed([]Update{arrivedPD("ab", 0, PDRoleDecode, ""), inputProcessed("ab", 1, 100), queued("ab", 2),
			kvWait("ab", 4, "prefill-0", 96), enFinished("ab", 5, FinishAbort), feFinished("ab", 6, FinishAbort)})
		_ = h.tr.RecordSchedulerStats(at(1000), SchedulerStats{})
		if s := h.tr.LastStats(); s.KVTransfers != 1 || s.KVTime != 10*time.Millisecond {
			t.Errorf("%d transfers, %v; want 1 of 10ms", s.KVTransfers, s.KVTime)
		}
	})
	t.Run("average below a millisecond", func(t *testing.T) {
		if got := (Stats{KVTransfers: 3, KVTime: 2700 * time.Microsecond}).String(); !strings.Contains(got, "avg 0.9 ms") {
			t.Errorf("%s", got)
		}
	})
	t.Run("hit rate absent", func(t *testing.T) {
		var logs bytes.Buffer
		h := newHarness(t, WithStatsLog(slog.New(slog.NewJSONHandler(&logs, nil)), time.Second))
		_ = h.tr.RecordSchedulerStats(at(0), SchedulerStats{})
		_ = h.tr.RecordSchedulerStats(at(1000), SchedulerStats{})
		if logs.Len() == 0 || strings.Contains(logs.String(), "prefix_cache_hit_rate") {
			t.Errorf("log %q: want a line without prefix_cache_hit_rate", logs.String())
		}
	})
}
