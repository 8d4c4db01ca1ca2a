package otelstats

import (
	"io"
	"log/slog"
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
