package otelstats

import "testing"

// TestIDReusedEngineAheadAfterFinish (SPEC §1: nothing of a request whose
// two sides reported is lost, whatever order its two streams came in): the
// engine's stream runs ahead of the frontend's, so the engine's QUEUED of a
// second request with the id "x" reaches the tracker after the first
// request's engine reported FINISHED — while the first waits for its
// frontend, or once it has ended — but before the second's ARRIVED. After
// its FINISHED the engine records nothing more for the first request: a
// QUEUED, which starts an engine's life, is the second's and is held for
// its ARRIVED, as are the engine updates behind it.
func TestIDReusedEngineAheadAfterFinish(t *testing.T) {
	cat := func(us ...[]Update) (out []Update) {
		for _, u := range us {
			out = append(out, u...)
		}
		return out
	}
	fe1, en1 := incarnation(0, 4)
	fe2, en2 := incarnation(100, 6)
	for _, c := range []struct {
		name string
		ops  []Update
	}{
		{"the first ended, then the second's engine", cat(en1, fe1, en2, fe2)},
		{"the first waits for its frontend", cat(fe1[:2], en1, en2[:2], fe1[2:], en2[2:], fe2)},
		{"the first waits, the second's engine whole", cat(fe1[:2], en1, en2, fe1[2:], fe2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			for _, u := range c.ops {
				if err := h.tr.Record(u); err != nil {
					t.Errorf("Record(%v at %vms): %v", u.Kind, msSince(u.Time), err)
				}
			}
			checkIncarnation(t, h, 0, 4)
			checkIncarnation(t, h, 100, 6)
			noRejects(t, h)
		})
	}
	t.Run("no ARRIVED comes", func(t *testing.T) {
		// Held, the QUEUED waits for an ARRIVED like any engine update
		// that came first, and is rejected when none comes.
		h := newHarness(t)
		h.feed(cat(en1, fe1, en2[:1]))
		h.tr.Sweep(at(102 + 2000))
		if n := h.rejects(ReasonUnknownRequest); n != 1 {
			t.Errorf("unknown_request = %d, want 1", n)
		}
	})
}
