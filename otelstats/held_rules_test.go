package otelstats

import (
	"testing"
)

// TestHeldRejectedLeavesStateUnchanged: an engine update held before its
// ARRIVED that breaks a rule when the ARRIVED comes is rejected, and the
// request's state is unchanged (SPEC §1): it does not mark the frontend
// as running behind, so an engine-only request still ends at its engine's
// FINISHED ("when only one side reports, that one ends the request")
// instead of waiting the grace period for a frontend that never reports.
func TestHeldRejectedLeavesStateUnchanged(t *testing.T) {
	run := func(t *testing.T, bad *Update) *harness {
		h := newHarness(t)
		if bad != nil {
			if err := h.tr.Record(*bad); err != nil {
				t.Fatalf("held update: %v", err)
			}
		}
		h.feed([]Update{
			arrived("r", 1, "m", "chat"),
			queued("r", 2),
			prefilling("r", 3, 2, 0),
			decoding("r", 4, 1),
			enFinished("r", 6, "stop"),
		})
		return h
	}
	want := run(t, nil)
	if n := want.tr.InFlight(); n != 0 {
		t.Fatalf("baseline: InFlight = %d after the engine's FINISHED, want 0", n)
	}
	for name, bad := range map[string]Update{
		"DECODING before PREFILLING": decoding("r", 0.5, 1),
		"PREEMPTED before QUEUED":    preempted("r", 0.5),
	} {
		t.Run(name, func(t *testing.T) {
			h := run(t, &bad)
			if n := h.rejects(ReasonBadTransition); n != 1 {
				t.Fatalf("bad_transition = %d, want 1", n)
			}
			if n := h.tr.InFlight(); n != 0 {
				t.Fatalf("InFlight = %d after the engine's FINISHED, want 0: the rejected update changed the request's state", n)
			}
			sameStats(t, h.statsOf("r"), want.statsOf("r"))
		})
	}
}
