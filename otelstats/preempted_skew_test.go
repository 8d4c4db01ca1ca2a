package otelstats

import (
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// preempted_duration_s is what the llm.queue (preempted) spans show: under
// skew their instants are clamped into the root, so the value is too and
// never exceeds e2e (README "Derived durations and skew").
func TestPreemptedMatchesSpansUnderSkew(t *testing.T) {
	for _, tc := range []struct {
		name string
		us   []Update
		want float64 // ms
	}{
		{
			name: "engine clock behind: the preemption before ARRIVED",
			us: []Update{arrived("s", 100, "m", "chat"), queued("s", 10), prefilling("s", 12, 8, 0), preempted("s", 20),
				prefilling("s", 95, 8, 0), decoding("s", 104, 1), detok("s", 106, 1, 0), enFinished("s", 108, "stop"), feFinished("s", 110, "stop")},
			want: 0, // the wait 20–95 lies before the root: clamped to 100–100
		},
		{
			name: "engine clock behind: a preemption across ARRIVED",
			us: []Update{arrived("s", 100, "m", "chat"), queued("s", 10), prefilling("s", 12, 8, 0), preempted("s", 90),
				prefilling("s", 130, 8, 0), decoding("s", 134, 1), detok("s", 136, 1, 0), enFinished("s", 138, "stop"), feFinished("s", 140, "stop")},
			want: 30, // 100–130
		},
		{
			name: "engine clock ahead: preempted and never resumed past the client's FINISHED",
			us: []Update{arrived("s", 0, "m", "chat"), queued("s", 2), prefilling("s", 4, 8, 0), decoding("s", 6, 1), detok("s", 7, 1, 0),
				preempted("s", 8), feFinished("s", 10, "abort"), enFinished("s", 50, "abort")},
			want: 2, // 8–10
		},
		{
			name: "no skew",
			us: []Update{arrived("s", 0, "m", "chat"), queued("s", 1), prefilling("s", 2, 8, 0), preempted("s", 5),
				prefilling("s", 15, 8, 0), decoding("s", 20, 1), detok("s", 21, 1, 0), enFinished("s", 22, "stop"), feFinished("s", 23, "stop")},
			want: 10,
		},
		{
			// 70 runs, past maxRuns: the engine's own sum (69 waits of
			// 5 ms), capped at e2e (20 ms) since its clock is behind.
			name: "past the run cap, engine clock behind",
			us:   manyPreemptions(70),
			want: 20,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.us)
			s := h.statsOf("s")
			_, kids := h.treeOf(s)
			var span time.Duration
			for _, k := range kids {
				if k.Name() != attributes.SpanQueue {
					continue
				}
				for _, a := range k.Attributes() {
					if a.Key == attributes.QueueReason && a.Value.AsString() == attributes.QueueReasonPreempted {
						span += k.EndTime().Sub(k.StartTime())
					}
				}
			}
			want := time.Duration(tc.want * float64(time.Millisecond))
			if s.PreemptedDuration != want {
				t.Errorf("preempted_duration_s = %v, want %v (its spans last %v)", s.PreemptedDuration, want, span)
			}
			if e2e := s.E2ELatency.Value; s.PreemptedDuration > e2e {
				t.Errorf("preempted_duration_s %v exceeds e2e %v", s.PreemptedDuration, e2e)
			}
		})
	}
}

// manyPreemptions is a request of n runs, each preempted 5 ms after it
// starts and resumed 5 ms later, on an engine clock far behind the
// frontend's: ARRIVED at 1000, the runs from 0, FINISHED at 1020.
func manyPreemptions(n int) []Update {
	us := []Update{arrived("s", 1000, "m", "chat"), queued("s", 0)}
	at := 0.0
	for i := 0; i < n; i++ {
		us = append(us, prefilling("s", at, 8, 0))
		if i == n-1 {
			break
		}
		us = append(us, preempted("s", at+5))
		at += 10
	}
	return append(us, decoding("s", at+1, 1), detok("s", 1010, 1, 0), enFinished("s", at+3, "stop"), feFinished("s", 1020, "stop"))
}
