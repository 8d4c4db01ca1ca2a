package otelstats

import (
	"testing"
	"time"
)

// incarnation is one request with id "x" arriving at t0 (ms), prompt
// tokens long, split into what its frontend and its engine record: two
// tokens, each side finishing (SPEC §1).
func incarnation(t0 float64, prompt int) (fe, en []Update) {
	u := func(kind Kind, ms float64) Update { return Update{RequestID: "x", Kind: kind, Time: at(t0 + ms)} }
	arrived := u(KindArrived, 0)
	arrived.Model = "m"
	input := u(KindInputProcessed, 1)
	input.NumPromptTokens = prompt
	prefill := u(KindPrefilling, 3)
	prefill.NumComputedTokens = prompt
	detok1, detok2 := u(KindDetokenized, 11), u(KindDetokenized, 21)
	detok1.NumNewTokens, detok2.NumNewTokens = 1, 1
	fe = []Update{arrived, input, detok1, detok2, feFinished("x", t0+22, "stop")}
	en = []Update{u(KindQueued, 2), prefill, u(KindDecoding, 10), u(KindDecoding, 20), enFinished("x", t0+21.5, "stop")}
	return fe, en
}

// checkIncarnation checks the stats of incarnation(t0, prompt): nothing
// of it lost to, or taken from, the other request with its id.
func checkIncarnation(t *testing.T, h *harness, t0 float64, prompt int) {
	t.Helper()
	var s *RequestStats
	for i := range h.stats {
		if msSince(h.stats[i].ArrivalTime) == t0 {
			s = &h.stats[i]
		}
	}
	if s == nil {
		t.Fatalf("the request that arrived at %vms did not finish (%d finished)", t0, len(h.stats))
	}
	if s.FinishReason != "stop" || s.NumPromptTokens != (Count{prompt, true}) || s.NumOutputTokens != 2 || s.ClampedSpans != 0 {
		t.Errorf("arrived at %vms: reason %q, prompt %v, out %d, clamped %d; want stop, %d, 2, 0",
			t0, s.FinishReason, s.NumPromptTokens, s.NumOutputTokens, s.ClampedSpans, prompt)
	}
	approx(t, "finished (ms)", msSince(s.FinishedTime), t0+22)
	wantLatency(t, "e2e", s.E2ELatency, 22)
	wantLatency(t, "queue", s.QueueDuration, 1)
	wantLatency(t, "ttft", s.FirstTokenLatency, 11)
	wantLatency(t, "prefill", s.PrefillLatency, 8)
	wantLatency(t, "inference", s.InferenceLatency, 19)
}

func noRejects(t *testing.T, h *harness) {
	t.Helper()
	if n := h.rejects(""); n != 0 {
		t.Errorf("%d updates rejected", n)
	}
	if n := h.tr.InFlight(); n != 0 {
		t.Errorf("InFlight = %d", n)
	}
}

// TestIDReusedEngineFirst: the engine's stream runs ahead of the
// frontend's, so the engine's updates for two requests that share the id
// "x" (the second arriving once the first is done) reach the tracker
// before either ARRIVED, or around the first one's. The first ARRIVED
// takes the held updates up to its engine's FINISHED; the rest stay held
// for the next ARRIVED of the id, and engine updates that come behind them
// join them: after its FINISHED the engine records nothing more for the
// first request.
func TestIDReusedEngineFirst(t *testing.T) {
	fe1, en1 := incarnation(0, 4)
	fe2, en2 := incarnation(100, 6)
	cat := func(us ...[]Update) (out []Update) {
		for _, u := range us {
			out = append(out, u...)
		}
		return out
	}
	for name, ops := range map[string][]Update{
		"all held":                      cat(en1, en2, fe1, fe2),
		"held across the first arrival": cat(en1, en2[:2], fe1[:2], en2[2:], fe1[2:], fe2),
		"held across the first's end":   cat(en1, en2[:2], fe1, en2[2:], fe2),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(ops)
			checkIncarnation(t, h, 0, 4)
			checkIncarnation(t, h, 100, 6)
			noRejects(t, h)
		})
	}
}

// TestIDReusedFrontendFirst: the first request with id "x" finishes on
// the frontend and waits for its engine's FINISHED (the engine's stream
// runs behind) when a new ARRIVED reuses the id. The first keeps waiting
// beside the second; the engine's updates go to the first when they are
// clearly its own — their time is before the second's ARRIVED, or they
// continue the first's engine life while the second's engine has not
// begun — and to the second otherwise.
func TestIDReusedFrontendFirst(t *testing.T) {
	t.Run("late engine updates before the reuse", func(t *testing.T) {
		fe1, en1 := incarnation(0, 4)
		fe2, en2 := incarnation(100, 6)
		h := newHarness(t)
		h.feed(fe1[:2])
		h.feed(en1[:1]) // the engine reports: the frontend's FINISHED waits for it
		h.feed(fe1[2:])
		h.feed(fe2[:2]) // the id reused while the first waits
		if len(h.stats) != 0 {
			t.Fatalf("the reuse ended the first request before its engine's updates")
		}
		h.feed(en1[1:]) // the first's engine, late
		checkIncarnation(t, h, 0, 4)
		h.feed(en2)
		h.feed(fe2[2:])
		checkIncarnation(t, h, 100, 6)
		noRejects(t, h)
	})
	t.Run("aborted and retried at once", func(t *testing.T) {
		// The client gives up on the first and retries with the same id;
		// the engine's abort of the first comes after the retry's ARRIVED.
		h := newHarness(t)
		x := func(kind Kind, ms float64) Update { return Update{RequestID: "x", Kind: kind, Time: at(ms)} }
		h.feed([]Update{
			{RequestID: "x", Kind: KindArrived, Time: at(0), Model: "m"},
			{RequestID: "x", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 4},
			x(KindQueued, 2),
			{RequestID: "x", Kind: KindPrefilling, Time: at(3), NumComputedTokens: 4},
			x(KindDecoding, 10),
			{RequestID: "x", Kind: KindDetokenized, Time: at(11), NumNewTokens: 1},
			feFinished("x", 12, FinishAbort),
			{RequestID: "x", Kind: KindArrived, Time: at(13), Model: "m"},
			{RequestID: "x", Kind: KindInputProcessed, Time: at(14), NumPromptTokens: 6},
			x(KindDecoding, 20), // the first's: its engine runs on until the abort reaches it
			enFinished("x", 21, FinishAbort),
			x(KindQueued, 22),
			{RequestID: "x", Kind: KindPrefilling, Time: at(23), NumComputedTokens: 6},
			x(KindDecoding, 30),
			enFinished("x", 31, "stop"),
			{RequestID: "x", Kind: KindDetokenized, Time: at(31.5), NumNewTokens: 1},
			feFinished("x", 32, "stop"),
		})
		noRejects(t, h)
		if len(h.stats) != 2 {
			t.Fatalf("%d finished, want 2", len(h.stats))
		}
		first, second := h.stats[0], h.stats[1]
		if first.FinishReason != FinishAbort || first.NumPromptTokens.N != 4 || second.FinishReason != "stop" || second.NumPromptTokens.N != 6 {
			t.Errorf("first %q %v, second %q %v", first.FinishReason, first.NumPromptTokens, second.FinishReason, second.NumPromptTokens)
		}
		wantLatency(t, "first e2e", first.E2ELatency, 12)
		wantLatency(t, "first queue", first.QueueDuration, 1)
		wantLatency(t, "second e2e", second.E2ELatency, 19)
		wantLatency(t, "second queue", second.QueueDuration, 1)
		wantLatency(t, "second ttft", second.FirstTokenLatency, 18.5)
		// The first's engine ran past the client's FINISHED: its decode
		// span is clamped into the root, as for any request; the second
		// has nothing of the first's.
		if second.ClampedSpans != 0 {
			t.Errorf("the second's clamped spans: %d", second.ClampedSpans)
		}
	})
	t.Run("the first's engine never finishes", func(t *testing.T) {
		fe1, en1 := incarnation(0, 4)
		fe2, en2 := incarnation(100, 6)
		h := newHarness(t)
		h.feed(fe1[:2])
		h.feed(en1[:4]) // no engine FINISHED for the first, ever
		h.feed(fe1[2:])
		h.feed(fe2[:2])
		h.feed(en2) // QUEUED cannot follow the first's DECODING: the second's
		h.feed(fe2[2:])
		checkIncarnation(t, h, 100, 6)
		if n := h.tr.InFlight(); n != 1 {
			t.Fatalf("InFlight = %d, want the first, waiting for its engine", n)
		}
		h.tr.Sweep(at(22 + 2000)) // the grace period
		if n := h.tr.InFlight(); n != 0 {
			t.Fatalf("InFlight = %d after the grace", n)
		}
		s := h.stats[1]
		wantLatency(t, "first e2e", s.E2ELatency, 22)
		wantLatency(t, "first queue", s.QueueDuration, 1)
		wantLatency(t, "first ttft", s.FirstTokenLatency, 11)
		if n := h.rejects(""); n != 0 {
			t.Errorf("%d updates rejected", n)
		}
	})
	t.Run("the second's QUEUED stamped before its ARRIVED", func(t *testing.T) {
		// The engine's clock runs 1.5 ms behind the frontend's: the
		// second's QUEUED is stamped before its ARRIVED. The first's
		// engine, in DECODING, cannot record a QUEUED: it is the second's.
		fe1, en1 := incarnation(0, 4)
		fe2, en2 := incarnation(100, 6)
		for i := range en2 {
			en2[i].Time = en2[i].Time.Add(-1500 * time.Microsecond)
		}
		h := newHarness(t)
		h.feed(fe1[:2])
		h.feed(en1[:3])
		h.feed(fe1[2:])
		h.feed(fe2[:2])
		h.feed(en2[:1]) // QUEUED at 100.5, before the second's ARRIVED at 100 + 1 − 1.5
		h.feed(en1[3:])
		h.feed(en2[1:])
		h.feed(fe2[2:])
		noRejects(t, h)
		checkIncarnation(t, h, 0, 4)
		s := h.stats[1]
		wantLatency(t, "second queue", s.QueueDuration, 1)
		wantLatency(t, "second inference", s.InferenceLatency, 20.5)
	})
}
