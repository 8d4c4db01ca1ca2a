package otelstats

import (
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestStatsInstantsAreRootBounds: RequestStats' arrival and finished
// times are the root span's start and end (SPEC §3: the values are the
// span boundaries), also when skew puts the engine's FINISHED, which ends
// an engine-only request, before the frontend's ARRIVED (SPEC §5: clamped
// and counted, never negative).
func TestStatsInstantsAreRootBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      []Update
		finished float64 // ms, the root's end
		clamped  bool
	}{
		{"in order", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			enFinished("r", 4, "stop"),
		}, 4, false},
		{"engine ends before the skewed ARRIVED", []Update{
			arrived("r", 10, "m", "chat"),
			queued("r", 2),
			prefilling("r", 3, 5, 0),
			decoding("r", 4, 1),
			enFinished("r", 6, "stop"),
		}, 10, true},
		{"aborted while queued, before the skewed ARRIVED", []Update{
			arrived("r", 10, "m", "chat"),
			queued("r", 2),
			enFinished("r", 3, "abort"),
		}, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.ops)
			h.tr.Flush()
			s := h.statsOf("r")
			root, _ := h.treeOf(s)
			if !s.ArrivalTime.Equal(root.StartTime()) || !s.FinishedTime.Equal(root.EndTime()) {
				t.Errorf("arrival %v, finished %v; the root spans [%v, %v]", msSince(s.ArrivalTime), msSince(s.FinishedTime),
					msSince(root.StartTime()), msSince(root.EndTime()))
			}
			approx(t, "finished (ms)", msSince(s.FinishedTime), tc.finished)
			if got := s.FinishedTime.Sub(s.ArrivalTime); got != s.E2ELatency.Value || got < 0 {
				t.Errorf("finished - arrival = %v, e2e %v", got, s.E2ELatency.Value)
			}
			if (s.ClampedSpans > 0) != tc.clamped {
				t.Errorf("ClampedSpans = %d, want clamped %v", s.ClampedSpans, tc.clamped)
			}
			if n := h.counter(attributes.MetricSpansClamped); int(n) != s.ClampedSpans {
				t.Errorf("llm.spans.clamped = %d, want %d", n, s.ClampedSpans)
			}
		})
	}
}

// TestPreemptedTimeZero: a request preempted and resumed at the same
// instant (two updates with one timestamp) spent 0 s preempted; the root
// says so, as preempted_duration_s does, rather than leaving out the value
// of a preemption that happened (SPEC §2: absent only when its instants
// never happened). A request never preempted has no such attribute.
func TestPreemptedTimeZero(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ops     []Update
		present bool
	}{
		{"resumed at once", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			preempted("r", 4),
			prefilling("r", 4, 6, 0),
			decoding("r", 5, 1),
			enFinished("r", 6, "stop"),
		}, true},
		{"never preempted", []Update{
			arrived("r", 0, "m", "chat"),
			queued("r", 1),
			prefilling("r", 2, 5, 0),
			decoding("r", 3, 1),
			enFinished("r", 6, "stop"),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.ops)
			s := h.statsOf("r")
			root, _ := h.treeOf(s)
			v, ok := attrOf(root.Attributes(), attributes.PreemptedTime)
			if ok != tc.present || ok && v.AsFloat64() != 0 {
				t.Errorf("root %s = %v (present %v), want present %v, 0", attributes.PreemptedTime, v.AsFloat64(), ok, tc.present)
			}
		})
	}
}
