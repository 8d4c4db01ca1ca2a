package otelstats

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/llmtrace/llmtrace/attributes"
)

// ruleScenario is a well-formed two-sided request "r" (model "m"), used as
// the backdrop of every rejection case: the bad update is injected after
// update number `after` and must leave the request exactly as it was.
//
// With feFirst the frontend's FINISHED reaches the tracker before the
// engine's, so that "after FINISHED" can be tested per side while the
// request is still in flight.
func ruleScenario(feFirst bool) []Update {
	us := []Update{
		0:  {RequestID: "r", Kind: KindArrived, Time: at(0), Model: "m", Operation: "chat"},
		1:  {RequestID: "r", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 10},
		2:  {RequestID: "r", Kind: KindQueued, Time: at(2)},
		3:  {RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: 6, NumCachedTokens: 4},
		4:  {RequestID: "r", Kind: KindPrefilling, Time: at(8), NumComputedTokens: 10, NumCachedTokens: 4},
		5:  {RequestID: "r", Kind: KindDecoding, Time: at(20)},
		6:  {RequestID: "r", Kind: KindDetokenized, Time: at(21), NumNewTokens: 1},
		7:  {RequestID: "r", Kind: KindDecoding, Time: at(30)},
		8:  {RequestID: "r", Kind: KindDetokenized, Time: at(31), NumNewTokens: 1},
		9:  {RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(32), FinishReason: "stop"},
		10: {RequestID: "r", Kind: KindFinished, Side: SideFrontend, Time: at(33), FinishReason: "stop"},
	}
	if feFirst {
		us[9], us[10] = us[10], us[9]
	}
	return us
}

// runRuleScenario feeds the scenario with bad injected after index after
// (after < 0: no injection) and returns the error of the injected update.
func runRuleScenario(h *harness, feFirst bool, after int, bad *Update) error {
	h.t.Helper()
	var err error
	us := ruleScenario(feFirst)
	if bad != nil && after < 0 {
		err = h.tr.Record(*bad)
	}
	for i, u := range us {
		h.must(u)
		if bad != nil && i == after {
			err = h.tr.Record(*bad)
		}
	}
	return err
}

func TestRuleScenarioBaseline(t *testing.T) {
	// The backdrop itself, hand-computed, so the "state unchanged"
	// comparisons below compare against known numbers.
	for _, feFirst := range []bool{false, true} {
		h := newHarness(t)
		if err := runRuleScenario(h, feFirst, -1, nil); err != nil {
			t.Fatal(err)
		}
		checkStats(t, h.statsOf("r"), wantStats{
			reason: "stop", arrived: 0, finished: 33,
			e2e:       33,            // 33 - 0 (the frontend's FINISHED)
			queue:     3,             // first PREFILLING 5 - QUEUED 2
			ttft:      21,            // first DETOKENIZED 21 - 0
			prefill:   16,            // 21 - 5
			decode:    12,            // 33 - 21
			inference: 28,            // 33 - 5
			tpot:      12,            // 12 / (2-1)
			itl:       []float64{10}, // 31 - 21
			prompt:    10, cached: 4, out: 2,
		})
		h.wantCounter("llm.rejected_updates", 0)
	}
}

func TestRejections(t *testing.T) {
	long := strings.Repeat("x", MaxIDLength+1)
	type tc struct {
		name    string
		feFirst bool
		after   int // inject after this update of ruleScenario
		u       Update
		reason  Reason
	}
	cases := []tc{
		// Unknown kinds and missing ids.
		{"kind zero", false, 4, Update{RequestID: "r", Kind: 0, Time: at(9)}, ReasonUnknownKind},
		{"kind past the last", false, 4, Update{RequestID: "r", Kind: kindCount, Time: at(9)}, ReasonUnknownKind},
		{"missing request id", false, 4, Update{Kind: KindDecoding, Time: at(9)}, ReasonMissingRequestID},
		{"id too long", false, 4, Update{RequestID: long, Kind: KindDecoding, Time: at(9)}, ReasonTooLong},
		{"scope too long", false, 4, Update{RequestID: "r2", Kind: KindArrived, Time: at(9), Model: "m", Scope: strings.Repeat("s", MaxNameLength+1)}, ReasonTooLong},

		// Bad timestamps.
		{"zero time", false, 4, Update{RequestID: "r", Kind: KindDecoding}, ReasonBadTimestamp},
		{"time at the unix epoch", false, 4, Update{RequestID: "r", Kind: KindDecoding, Time: time.Unix(0, 0)}, ReasonBadTimestamp},
		{"time before 1970", false, 4, Update{RequestID: "r", Kind: KindDecoding, Time: time.Date(1969, 7, 20, 0, 0, 0, 0, time.UTC)}, ReasonBadTimestamp},
		{"time after 2200", false, 4, Update{RequestID: "r", Kind: KindDecoding, Time: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, ReasonBadTimestamp},

		// Wrong side.
		{"QUEUED from the frontend", false, 1, Update{RequestID: "r", Kind: KindQueued, Side: SideFrontend, Time: at(2)}, ReasonWrongSide},
		{"DECODING from the frontend", false, 4, Update{RequestID: "r", Kind: KindDecoding, Side: SideFrontend, Time: at(9)}, ReasonWrongSide},
		{"DETOKENIZED from the engine", false, 6, Update{RequestID: "r", Kind: KindDetokenized, Side: SideEngine, Time: at(22), NumNewTokens: 1}, ReasonWrongSide},
		{"INPUT_PROCESSED from the engine", false, 0, Update{RequestID: "r", Kind: KindInputProcessed, Side: SideEngine, Time: at(1), NumPromptTokens: 10}, ReasonWrongSide},
		{"ARRIVED from the engine", false, 4, Update{RequestID: "r2", Kind: KindArrived, Side: SideEngine, Time: at(9), Model: "m"}, ReasonWrongSide},
		{"unknown side", false, 4, Update{RequestID: "r", Kind: KindDecoding, Side: Side(3), Time: at(9)}, ReasonWrongSide},

		// Required payload.
		{"ARRIVED without model", false, 4, Update{RequestID: "r2", Kind: KindArrived, Time: at(9)}, ReasonMissingPayload},
		{"FINISHED without reason (frontend)", false, 8, Update{RequestID: "r", Kind: KindFinished, Time: at(32)}, ReasonMissingPayload},
		{"FINISHED without reason (engine)", false, 8, Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(32)}, ReasonMissingPayload},

		// Negative and absurd counts.
		{"negative prompt tokens", false, 0, Update{RequestID: "r", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: -1}, ReasonNegativeCount},
		{"absurd prompt tokens", false, 0, Update{RequestID: "r", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: MaxTokenCount + 1}, ReasonAbsurdCount},
		{"negative computed", false, 2, Update{RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: -6}, ReasonNegativeCount},
		{"negative cached", false, 2, Update{RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: 6, NumCachedTokens: -1}, ReasonNegativeCount},
		{"absurd computed", false, 2, Update{RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: MaxTokenCount + 1}, ReasonAbsurdCount},
		{"negative new tokens (DECODING)", false, 5, Update{RequestID: "r", Kind: KindDecoding, Time: at(25), NumNewTokens: -2}, ReasonNegativeCount},
		{"absurd new tokens (DECODING)", false, 5, Update{RequestID: "r", Kind: KindDecoding, Time: at(25), NumNewTokens: 1<<20 + 1}, ReasonAbsurdCount},
		{"negative new tokens (DETOKENIZED)", false, 6, Update{RequestID: "r", Kind: KindDetokenized, Time: at(25), NumNewTokens: -1}, ReasonNegativeCount},
		{"absurd new tokens (DETOKENIZED)", false, 6, Update{RequestID: "r", Kind: KindDetokenized, Time: at(25), NumNewTokens: 1 << 21}, ReasonAbsurdCount},
		{"negative busy time", false, 6, Update{RequestID: "r", Kind: KindDetokenized, Time: at(25), NumNewTokens: 1, Busy: -time.Millisecond}, ReasonNegativeCount},
		{"negative prompt tokens on FINISHED", false, 8, Update{RequestID: "r", Kind: KindFinished, Time: at(32), FinishReason: "stop", NumPromptTokens: -3}, ReasonNegativeCount},

		// cached ≤ computed ≤ prompt + generated.
		{"cached > computed", false, 2, Update{RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: 5, NumCachedTokens: 6}, ReasonCachedExceedsComputed},
		{"cached > computed on a chunk", false, 3, Update{RequestID: "r", Kind: KindPrefilling, Time: at(8), NumComputedTokens: 10, NumCachedTokens: 11}, ReasonCachedExceedsComputed},
		// prompt 10 + generated 0 = 10 < 11.
		{"computed > prompt + generated", false, 2, Update{RequestID: "r", Kind: KindPrefilling, Time: at(5), NumComputedTokens: 11}, ReasonComputedExceedsTokens},
		{"computed > prompt + generated on a chunk", false, 3, Update{RequestID: "r", Kind: KindPrefilling, Time: at(8), NumComputedTokens: 11, NumCachedTokens: 4}, ReasonComputedExceedsTokens},

		// Disallowed transitions, engine side.
		{"DECODING after QUEUED", false, 2, Update{RequestID: "r", Kind: KindDecoding, Time: at(3)}, ReasonBadTransition},
		{"DECODING before QUEUED", false, 1, Update{RequestID: "r", Kind: KindDecoding, Time: at(2)}, ReasonBadTransition},
		{"PREFILLING before QUEUED", false, 1, Update{RequestID: "r", Kind: KindPrefilling, Time: at(2), NumComputedTokens: 6}, ReasonBadTransition},
		{"PREEMPTED before QUEUED", false, 1, Update{RequestID: "r", Kind: KindPreempted, Time: at(2)}, ReasonBadTransition},
		{"PREEMPTED after QUEUED", false, 2, Update{RequestID: "r", Kind: KindPreempted, Time: at(3)}, ReasonBadTransition},
		{"QUEUED twice", false, 2, Update{RequestID: "r", Kind: KindQueued, Time: at(3)}, ReasonBadTransition},
		{"QUEUED after PREFILLING", false, 3, Update{RequestID: "r", Kind: KindQueued, Time: at(6)}, ReasonBadTransition},
		{"PREFILLING after DECODING without PREEMPTED", false, 5, Update{RequestID: "r", Kind: KindPrefilling, Time: at(20), NumComputedTokens: 10}, ReasonBadTransition},
		{"QUEUED after DECODING", false, 7, Update{RequestID: "r", Kind: KindQueued, Time: at(30)}, ReasonBadTransition},

		// Disallowed transitions, frontend side.
		{"INPUT_PROCESSED twice", false, 1, Update{RequestID: "r", Kind: KindInputProcessed, Time: at(2), NumPromptTokens: 10}, ReasonBadTransition},
		{"INPUT_PROCESSED after DETOKENIZED", false, 6, Update{RequestID: "r", Kind: KindInputProcessed, Time: at(22), NumPromptTokens: 10}, ReasonBadTransition},

		// Time never runs backwards within one side.
		{"frontend time backwards", false, 8, Update{RequestID: "r", Kind: KindDetokenized, Time: at(30), NumNewTokens: 1}, ReasonTimeBackwards},
		{"frontend FINISHED backwards", false, 8, Update{RequestID: "r", Kind: KindFinished, Time: at(30.5), FinishReason: "stop"}, ReasonTimeBackwards},
		{"engine time backwards", false, 7, Update{RequestID: "r", Kind: KindDecoding, Time: at(29)}, ReasonTimeBackwards},
		{"engine chunk backwards", false, 3, Update{RequestID: "r", Kind: KindPrefilling, Time: at(4), NumComputedTokens: 10, NumCachedTokens: 4}, ReasonTimeBackwards},
		{"engine FINISHED backwards", false, 7, Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(25), FinishReason: "stop"}, ReasonTimeBackwards},
		{"INPUT_PROCESSED before ARRIVED", false, 0, Update{RequestID: "r", Kind: KindInputProcessed, Time: at(-1), NumPromptTokens: 10}, ReasonTimeBackwards},

		// Duplicate arrival, after FINISHED.
		{"duplicate ARRIVED", false, 0, Update{RequestID: "r", Kind: KindArrived, Time: at(0.5), Model: "m"}, ReasonDuplicateArrival},
		{"duplicate ARRIVED mid-decode", false, 6, Update{RequestID: "r", Kind: KindArrived, Time: at(22), Model: "m"}, ReasonDuplicateArrival},
		{"engine update after the engine's FINISHED", false, 9, Update{RequestID: "r", Kind: KindDecoding, Time: at(32.5)}, ReasonAfterFinished},
		{"engine FINISHED twice", false, 9, Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(32.5), FinishReason: "stop"}, ReasonAfterFinished},
		{"frontend update after the frontend's FINISHED", true, 9, Update{RequestID: "r", Kind: KindDetokenized, Time: at(34), NumNewTokens: 1}, ReasonAfterFinished},
		{"frontend FINISHED twice", true, 9, Update{RequestID: "r", Kind: KindFinished, Time: at(34), FinishReason: "abort"}, ReasonAfterFinished},
		{"engine update after the request finished", false, 10, Update{RequestID: "r", Kind: KindDecoding, Time: at(40)}, ReasonAfterFinished},
		{"frontend update after the request finished", false, 10, Update{RequestID: "r", Kind: KindDetokenized, Time: at(40), NumNewTokens: 1}, ReasonAfterFinished},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Baseline: the same scenario without the bad update.
			hb := newHarness(t)
			if err := runRuleScenario(hb, c.feFirst, -1, nil); err != nil {
				t.Fatal(err)
			}
			want := hb.statsOf("r")

			h := newHarness(t)
			err := runRuleScenario(h, c.feFirst, c.after, &c.u)
			checkRejection(t, err, c.u, c.reason)
			// Exactly one rejection, of this reason.
			if n := h.rejects(c.reason); n != 1 {
				t.Errorf("llm.rejected_updates{reason=%s} = %d, want 1", c.reason, n)
			}
			if n := h.rejects(""); n != 1 {
				t.Errorf("llm.rejected_updates total = %d, want 1", n)
			}
			// The request's state is unchanged: it finishes with the same
			// stats, and nothing else finished or stayed in flight.
			sameStats(t, h.statsOf("r"), want)
			if len(h.stats) != 1 {
				t.Errorf("%d requests finished, want 1", len(h.stats))
			}
			if n := h.tr.InFlight(); n != 0 {
				t.Errorf("InFlight = %d, want 0", n)
			}
			h.wantCounter("llm.server.requests", 1)
		})
	}
}

// checkRejection checks the typed error of a rejected update u.
func checkRejection(t *testing.T, err error, u Update, reason Reason) {
	t.Helper()
	if err == nil {
		t.Fatalf("%v accepted, want rejected as %s", u.Kind, reason)
	}
	if !errors.Is(err, ErrRejected) {
		t.Errorf("errors.Is(err, ErrRejected) = false for %v", err)
	}
	if !errors.Is(err, reason) {
		t.Errorf("errors.Is(err, %s) = false for %v", reason, err)
	}
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("error %T is not a *RejectError", err)
	}
	wantID := u.RequestID
	if len(wantID) > MaxIDLength {
		wantID = wantID[:MaxIDLength]
	}
	if re.RequestID != wantID || re.Kind != u.Kind || re.Reason != reason {
		t.Errorf("RejectError{%q, %v, %s}, want {%q, %v, %s}", re.RequestID, re.Kind, re.Reason, wantID, u.Kind, reason)
	}
	msg := err.Error()
	if !strings.Contains(msg, u.Kind.String()) || !strings.Contains(msg, strings.ReplaceAll(string(reason), "_", " ")) {
		t.Errorf("message %q does not name the kind %v and the rule %s", msg, u.Kind, reason)
	}
	if u.RequestID != "" && len(u.RequestID) <= 64 && !strings.Contains(msg, `"`+u.RequestID+`"`) {
		t.Errorf("message %q does not name the request %q", msg, u.RequestID)
	}
}

// TestTimeAcrossSidesNotRejected: time runs forward within each side, but
// the two sides' clocks are not compared (SPEC §1, §5).
func TestTimeAcrossSidesNotRejected(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{
		{RequestID: "r", Kind: KindArrived, Time: at(10), Model: "m"},
		{RequestID: "r", Kind: KindInputProcessed, Time: at(20), NumPromptTokens: 4},
		// The engine's clock runs 15 ms behind: its QUEUED is "before"
		// the frontend's INPUT_PROCESSED and even before ARRIVED.
		{RequestID: "r", Kind: KindQueued, Time: at(5)},
		{RequestID: "r", Kind: KindPrefilling, Time: at(7), NumComputedTokens: 4},
		{RequestID: "r", Kind: KindDetokenized, Time: at(40), NumNewTokens: 1},
		{RequestID: "r", Kind: KindDecoding, Time: at(25)},
		{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(26), FinishReason: "stop"},
		{RequestID: "r", Kind: KindFinished, Time: at(41), FinishReason: "stop"},
	})
	if n := h.rejects(""); n != 0 {
		t.Fatalf("%d rejections across sides, want 0", n)
	}
	s := h.statsOf("r")
	// The engine's instants before ARRIVED are clamped into the root, in
	// the stats as in the tree (SPEC §3: the values of §2 are the span
	// boundaries; §5: skew is clamped and counted):
	//   queue [5,7] → [10,10]; prefill [7,40] → [10,40];
	//   decode [first token 40, engine FINISHED 26] → empty at 40.
	checkStats(t, s, wantStats{
		reason: "stop", arrived: 10, finished: 41,
		e2e:       31, // 41 - 10
		queue:     0,  // clamp(7) - clamp(5) = 10 - 10
		ttft:      30, // 40 - 10
		prefill:   30, // 40 - clamp(7)
		decode:    1,  // 41 - 40
		inference: 31, // 41 - clamp(7)
		tpot:      absent,
		prompt:    4, cached: 0, out: 1,
	})
	// At least the queue and the prefill were moved into the root. (The
	// decode segment, whose first delivery comes after the engine's end,
	// is made empty; whether that counts as a clamp is the span builder's
	// call.)
	if s.ClampedSpans < 2 {
		t.Errorf("ClampedSpans = %d, want >= 2 (queue, prefill)", s.ClampedSpans)
	}
	h.checkTree(s, wantRoot{name: "chat m", start: 10, end: 41}, []wantSpan{
		spInput(10, 20, 4),
		spQueue(10, 10, "new"),
		spPrefill(10, 40, 4, 0, 1, false),
		spDecode(40, 40, 1, 0),
		spDetok(40, 40, 0, 1),
	})
	h.wantCounter(attributes.MetricSpansClamped, int64(s.ClampedSpans))
}

// TestUnknownRequestHeldThenRejected: an engine update before its ARRIVED is
// held for the hold window, then rejected as unknown_request (SPEC §1).
func TestUnknownRequestHeldThenRejected(t *testing.T) {
	t.Run("sweep", func(t *testing.T) {
		h := newHarness(t, WithHoldWindow(100*time.Millisecond))
		if err := h.tr.Record(Update{RequestID: "ghost", Kind: KindQueued, Time: at(0)}); err != nil {
			t.Fatalf("held update returned %v, want nil", err)
		}
		h.tr.Sweep(at(99)) // 99 ms < 100 ms hold window
		if n := h.rejects(ReasonUnknownRequest); n != 0 {
			t.Fatalf("rejected after 99ms: %d", n)
		}
		h.tr.Sweep(at(100)) // 100 - 0 >= 100
		if n := h.rejects(ReasonUnknownRequest); n != 1 {
			t.Fatalf("unknown_request = %d, want 1", n)
		}
		// Its ARRIVED now starts a fresh request with nothing held.
		h.must(Update{RequestID: "ghost", Kind: KindArrived, Time: at(101), Model: "m"})
		h.must(Update{RequestID: "ghost", Kind: KindFinished, Time: at(111), FinishReason: "abort"})
		s := h.statsOf("ghost")
		wantLatency(t, "queue", s.QueueDuration, absent)
		wantLatency(t, "e2e", s.E2ELatency, 10)
		if n := h.rejects(""); n != 1 {
			t.Errorf("total rejections = %d, want 1", n)
		}
	})
	t.Run("flush", func(t *testing.T) {
		h := newHarness(t) // default 2 s hold window
		h.must(Update{RequestID: "ghost", Kind: KindQueued, Time: at(0)})
		h.must(Update{RequestID: "ghost", Kind: KindPrefilling, Time: at(1), NumComputedTokens: 3})
		h.tr.Flush() // a replayed log's end: held updates are rejected now
		if n := h.rejects(ReasonUnknownRequest); n != 2 {
			t.Fatalf("unknown_request = %d, want 2", n)
		}
	})
	t.Run("automatic sweep as time advances", func(t *testing.T) {
		h := newHarness(t, WithHoldWindow(100*time.Millisecond))
		h.must(Update{RequestID: "ghost", Kind: KindQueued, Time: at(0)})
		// Another request's updates move the tracker's time on; it sweeps
		// by itself every min(grace, hold)/2 = 50 ms of recorded time.
		h.must(Update{RequestID: "other", Kind: KindArrived, Time: at(500), Model: "m"})
		if n := h.rejects(ReasonUnknownRequest); n != 1 {
			t.Fatalf("unknown_request = %d, want 1", n)
		}
	})
	t.Run("ARRIVED after the window, no sweep between", func(t *testing.T) {
		h := newHarness(t) // default 2 s hold window
		h.must(Update{RequestID: "late", Kind: KindQueued, Time: at(0)})
		h.must(Update{RequestID: "kept", Kind: KindQueued, Time: at(4002)})
		// The ARRIVEDs come first to move time: whether a sweep ran
		// before them must not decide what their held updates become.
		h.must(Update{RequestID: "late", Kind: KindArrived, Time: at(4001), Model: "m"})
		h.must(Update{RequestID: "kept", Kind: KindArrived, Time: at(4001), Model: "m"})
		if n := h.rejects(ReasonUnknownRequest); n != 1 {
			t.Fatalf("unknown_request = %d, want 1 (the QUEUED held 4 s)", n)
		}
		h.must(Update{RequestID: "kept", Kind: KindPrefilling, Time: at(4005), NumComputedTokens: 3})
		for _, id := range []string{"late", "kept"} {
			h.must(Update{RequestID: id, Kind: KindFinished, Side: SideEngine, Time: at(4010), FinishReason: "abort"})
		}
		h.tr.Flush()
		wantLatency(t, "queue of the expired", h.statsOf("late").QueueDuration, absent)
		wantLatency(t, "queue of the one held a moment", h.statsOf("kept").QueueDuration, 3)
	})
	t.Run("overloaded", func(t *testing.T) {
		h := newHarness(t, WithMaxHeld(1))
		h.must(Update{RequestID: "g1", Kind: KindQueued, Time: at(0)})
		u := Update{RequestID: "g2", Kind: KindQueued, Time: at(1)}
		checkRejection(t, h.tr.Record(u), u, ReasonOverloaded)
		if n := h.rejects(ReasonOverloaded); n != 1 {
			t.Errorf("overloaded = %d, want 1", n)
		}
	})
}

// TestAmbiguousRequest: two in-flight requests share id "x" under different
// models; updates must name the model.
func TestAmbiguousRequest(t *testing.T) {
	h := newHarness(t)
	h.must(Update{RequestID: "x", Kind: KindArrived, Time: at(0), Model: "llama"})
	h.must(Update{RequestID: "x", Kind: KindArrived, Time: at(1), Model: "qwen"})
	u := Update{RequestID: "x", Kind: KindQueued, Time: at(2)}
	checkRejection(t, h.tr.Record(u), u, ReasonAmbiguousRequest)
	if n := h.rejects(ReasonAmbiguousRequest); n != 1 {
		t.Errorf("ambiguous_request = %d, want 1", n)
	}
	// A duplicate ARRIVED is one with the same id and model.
	dup := Update{RequestID: "x", Kind: KindArrived, Time: at(3), Model: "qwen"}
	checkRejection(t, h.tr.Record(dup), dup, ReasonDuplicateArrival)
	if n := h.tr.InFlight(); n != 2 {
		t.Errorf("InFlight = %d, want 2", n)
	}
}

// TestClosed: after Shutdown every update is rejected as closed.
func TestClosed(t *testing.T) {
	h := newHarness(t)
	if err := h.tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	u := Update{RequestID: "late", Kind: KindArrived, Time: at(0), Model: "m"}
	checkRejection(t, h.tr.Record(u), u, ReasonClosed)
	q, err := h.tr.Arrive(t.Context(), "late2", Arrival{Time: at(0), Model: "m"})
	if !errors.Is(err, ReasonClosed) {
		t.Errorf("Arrive after Shutdown: %v, want closed", err)
	}
	if err := q.Finish(at(1), "stop"); !errors.Is(err, ErrRejected) {
		t.Errorf("handle of a rejected arrival: %v, want a rejection", err)
	}
	if n := h.rejects(ReasonClosed); n != 2 {
		t.Errorf("closed = %d, want 2", n)
	}
}

// TestEngineTokenAfterFrontendFinished: the client aborts at 6 ms; the
// engine, not yet aware, still produces a token at 17 ms and finishes at 20.
// No frontend delivery, and the engine's token came after the request
// ended at the frontend's FINISHED (SPEC §1): it reached no one, so it has
// no token time — an abort before the first token has no TTFT (SPEC §2),
// and no prefill or decode latency, nor an llm.decode span. It still
// counts. (First found by FuzzUpdateSequence as a TTFT above e2e.)
func TestEngineTokenAfterFrontendFinished(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{
		arrived("late", 0, "m", "chat"),
		inputProcessed("late", 1, 3),
		queued("late", 2),
		prefilling("late", 3, 3, 0),
		feFinished("late", 6, "abort"), // waits for the engine, which has reported
		decoding("late", 17, 1),
		enFinished("late", 20, "abort"),
	})
	s := h.statsOf("late")
	checkStats(t, s, wantStats{
		reason: "abort", errType: "abort", arrived: 0, finished: 6,
		e2e:       6,
		queue:     1, // 3 - 2
		ttft:      absent,
		prefill:   absent,
		decode:    absent,
		inference: 3, // 6 - 3
		tpot:      absent,
		prompt:    3, cached: 0, out: 1,
	})
	h.checkTree(s, wantRoot{name: "chat m", start: 0, end: 6, status: codes.Error, statusDesc: "abort"}, []wantSpan{
		spInput(0, 1, 3),
		spHandoff(1, 2),
		spQueue(2, 3, "new"),
		spPrefill(3, 6, 3, 0, 1, false), // no first token: to the root's end
	})
	h.wantHist(attributes.MetricTimeToFirstToken, 0, 0)
}

// TestRejectionsAfterPreemption: rules around a preemption, injected into
// the "recompute preemption during decode" scenario right after its
// PREEMPTED (update 8, at 35 ms); the request must end with that
// scenario's hand-computed stats.
func TestRejectionsAfterPreemption(t *testing.T) {
	var sc scenario
	for _, s := range scenarios {
		if s.id == "pre-decode" {
			sc = s
		}
	}
	if sc.ops[8].Kind != KindPreempted {
		t.Fatalf("scenario changed: update 8 is %v", sc.ops[8].Kind)
	}
	cases := []struct {
		name   string
		u      Update
		reason Reason
	}{
		// Recompute may cover prompt 10 + 2 generated = 12, not 13.
		{"recompute computed > prompt + generated", prefilling("pre-decode", 50, 13, 2), ReasonComputedExceedsTokens},
		{"recompute cached > computed", prefilling("pre-decode", 50, 12, 13), ReasonCachedExceedsComputed},
		{"DECODING after PREEMPTED", decoding("pre-decode", 40, 1), ReasonBadTransition},
		{"PREEMPTED twice", preempted("pre-decode", 40), ReasonBadTransition},
		{"QUEUED after PREEMPTED", queued("pre-decode", 40), ReasonBadTransition},
		{"resume before the preemption", prefilling("pre-decode", 34, 12, 2), ReasonTimeBackwards},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			for i, u := range sc.ops {
				h.must(u)
				if i == 8 {
					checkRejection(t, h.tr.Record(c.u), c.u, c.reason)
				}
			}
			if n, all := h.rejects(c.reason), h.rejects(""); n != 1 || all != 1 {
				t.Errorf("rejections: %s = %d, total %d; want 1, 1", c.reason, n, all)
			}
			checkStats(t, h.statsOf("pre-decode"), sc.stats)
		})
	}
}

// TestErrorStatusOnlyOnFailure: SPEC §3, status Error with error.type on a
// failure. The finish reason decides: an error type beside stop (a stray
// one, or the engine's failure where the client saw the stream end well)
// makes no Error, and a failure without one takes its reason.
func TestErrorStatusOnlyOnFailure(t *testing.T) {
	cases := []struct {
		name          string
		enReason      string // "" no engine FINISHED
		enErr         string
		feReason      string
		feErr         string
		reason, errTy string
	}{
		{name: "stop with a stray error type", feReason: "stop", feErr: "x", reason: "stop"},
		{name: "engine error, client saw stop", enReason: "error", enErr: "oom", feReason: "stop", reason: "stop"},
		{name: "engine error, client saw it", enReason: "error", enErr: "oom", feReason: "error", reason: "error", errTy: "oom"},
		{name: "abort without a type", feReason: "abort", reason: "abort", errTy: "abort"},
		{name: "error with a type", feReason: "error", feErr: "timeout", reason: "error", errTy: "timeout"},
		{name: "length", enReason: "length", feReason: "length", reason: "length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.must(Update{RequestID: "r", Kind: KindArrived, Time: at(0), Model: "m"})
			h.must(Update{RequestID: "r", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 4})
			h.must(Update{RequestID: "r", Kind: KindQueued, Time: at(2)})
			h.must(Update{RequestID: "r", Kind: KindPrefilling, Time: at(3), NumComputedTokens: 4})
			h.must(Update{RequestID: "r", Kind: KindDecoding, Time: at(4)})
			h.must(Update{RequestID: "r", Kind: KindDetokenized, Time: at(5), NumNewTokens: 1})
			if c.enReason != "" {
				h.must(Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(6), FinishReason: c.enReason, ErrorType: c.enErr})
			}
			h.must(Update{RequestID: "r", Kind: KindFinished, Time: at(7), FinishReason: c.feReason, ErrorType: c.feErr})
			h.tr.Flush() // the wait for the engine's FINISHED, where it gave none
			s := h.statsOf("r")
			if s.FinishReason != c.reason || s.ErrorType != c.errTy {
				t.Fatalf("finish %q error.type %q, want %q %q", s.FinishReason, s.ErrorType, c.reason, c.errTy)
			}
			root, _ := h.treeOf(s)
			_, hasErr := attrOf(root.Attributes(), attributes.ErrorType)
			if failed := c.errTy != ""; (root.Status().Code == codes.Error) != failed || hasErr != failed {
				t.Errorf("root status %v, error.type present %v; want an error %v", root.Status(), hasErr, failed)
			}
			if c.errTy == "" {
				h.wantHist(attributes.MetricRequestDuration, 1, 7)
			} else {
				h.wantHist(attributes.MetricRequestDuration, 1, 7, attributes.ErrorType.String(c.errTy))
			}
		})
	}
}

// TestPresenceWindow: a side is present while the tracker accepted one of
// its updates within the last minute (SPEC §1), to the millisecond: an
// engine FINISHED waits for the frontend 59.9 s after the frontend's last
// update, not 60.5 s after.
func TestPresenceWindow(t *testing.T) {
	for _, c := range []struct {
		after float64 // ms from the frontend's last update to the engine's FINISHED
		waits bool
	}{{59_900, true}, {60_500, false}} {
		t.Run(fmt.Sprint(c.after), func(t *testing.T) {
			h := newHarness(t, WithRequestTTL(10*time.Minute))
			h.must(Update{RequestID: "a", Kind: KindArrived, Time: at(0), Model: "m"})
			h.must(Update{RequestID: "a", Kind: KindInputProcessed, Time: at(2), NumPromptTokens: 3})
			h.must(Update{RequestID: "a", Kind: KindFinished, Time: at(2), FinishReason: "abort"})
			end := 2 + c.after
			h.must(Update{RequestID: "b", Kind: KindArrived, Time: at(end - 4), Model: "m"})
			h.must(Update{RequestID: "b", Kind: KindQueued, Time: at(end - 3)})
			h.must(Update{RequestID: "b", Kind: KindPrefilling, Time: at(end - 2), NumComputedTokens: 3})
			h.must(Update{RequestID: "b", Kind: KindDecoding, Time: at(end - 1)})
			h.must(Update{RequestID: "b", Kind: KindFinished, Side: SideEngine, Time: at(end), FinishReason: "stop"})
			if ended := len(h.stats) == 2; ended == c.waits {
				t.Fatalf("b ended at once: %v, want waiting for the frontend: %v", ended, c.waits)
			}
		})
	}
}

// TestLatePromptCountChecked: a prompt count that reaches the tracker after
// the engine updates it bounds (the two streams travel apart, SPEC §1) is
// checked against them, as they would have been checked against it in time
// order: remote ≤ prompt (§7), computed ≤ prompt + generated (§1). The
// count is rejected, so no request ends with more cached or remote tokens
// than prompt tokens, whatever the order.
func TestLatePromptCountChecked(t *testing.T) {
	engine := func(id string, pd bool) []Update {
		if !pd {
			return []Update{arrived(id, 0, "m", "chat"), queued(id, 3), prefilling(id, 4, 100, 50), decoding(id, 6, 1)}
		}
		return []Update{arrivedPD(id, 0, PDRoleDecode, ""), queued(id, 3), kvWait(id, 4, "p-0", 60),
			kvReady(id, 5, 60, 1<<20, ""), prefilling(id, 6, 100, 30), decoding(id, 8, 1)}
	}
	cases := []struct {
		name   string
		pd     bool
		late   Update
		reason Reason // "" accepted
	}{
		{"INPUT_PROCESSED under computed", false, inputProcessed("r", 2, 10), ReasonComputedExceedsTokens},
		{"INPUT_PROCESSED that admits them", false, inputProcessed("r", 2, 100), ""},
		{"FINISHED's prompt under computed", false,
			Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(9), FinishReason: "stop", NumPromptTokens: 10},
			ReasonComputedExceedsTokens},
		{"FINISHED's prompt under remote", true,
			Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(9), FinishReason: "stop", NumPromptTokens: 50},
			ReasonRemoteExceedsPrompt},
		{"FINISHED's prompt that admits them", true,
			Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(9), FinishReason: "stop", NumPromptTokens: 100}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(engine("r", c.pd))
			err := h.tr.Record(c.late)
			if c.reason != "" {
				checkRejection(t, err, c.late, c.reason)
			} else if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			_ = h.tr.Record(Update{RequestID: "r", Kind: KindFinished, Side: SideEngine, Time: at(9), FinishReason: "stop"})
			h.tr.Flush()
			s := h.statsOf("r")
			if p := s.NumPromptTokens; p.Valid && (s.NumCachedTokens.N > p.N || s.NumRemoteTokens > p.N) {
				t.Fatalf("prompt %d with %d cached and %d remote", p.N, s.NumCachedTokens.N, s.NumRemoteTokens)
			}
			if (c.reason == "") != s.NumPromptTokens.Valid {
				t.Errorf("prompt %+v after the late count was accepted: %v", s.NumPromptTokens, c.reason == "")
			}
		})
	}
}
