package otelstats

import (
	"errors"
	"testing"
	"time"
)

// A live tracker (WithAutoSweep) expires on its own clock, here moved by
// explicit Sweeps (the goroutine's interval is an hour, so it never runs).
func newLiveHarness(t *testing.T, opts ...Option) (*harness, time.Time) {
	h := newHarness(t, append([]Option{WithAutoSweep(time.Hour)}, opts...)...)
	now := time.Now().Round(0) // wall time, like an update from another process
	h.tr.Sweep(now)
	return h, now
}

// Issue 12.3: one producer's clock 15 minutes ahead must not end the other
// producers' requests; its update is rejected as bad_timestamp.
func TestLiveSkewedProducerEndsNothing(t *testing.T) {
	h, now := newLiveHarness(t, WithRequestTTL(10*time.Minute))
	ms := func(d float64) time.Time { return now.Add(time.Duration(d * float64(time.Millisecond))) }
	h.must(Update{RequestID: "a", Kind: KindArrived, Time: ms(0), Model: "m"})
	h.must(Update{RequestID: "a", Kind: KindQueued, Time: ms(1)})
	// The skewed producer: 15 minutes ahead.
	err := h.tr.Record(Update{RequestID: "b", Kind: KindArrived, Time: now.Add(15 * time.Minute), Model: "m"})
	if !errors.Is(err, ReasonBadTimestamp) {
		t.Fatalf("an ARRIVED 15 min ahead: %v, want bad_timestamp", err)
	}
	if h.rejects(ReasonBadTimestamp) != 1 {
		t.Fatalf("bad_timestamp not counted")
	}
	// Within the bound it is accepted, and still moves nothing.
	h.must(Update{RequestID: "c", Kind: KindArrived, Time: now.Add(30 * time.Second), Model: "m"})
	h.tr.Sweep(ms(5))
	if len(h.stats) != 0 {
		t.Fatalf("%d requests ended: %+v", len(h.stats), h.stats)
	}
	h.must(Update{RequestID: "a", Kind: KindPrefilling, Time: ms(2), NumComputedTokens: 4})
	h.must(Update{RequestID: "a", Kind: KindDecoding, Time: ms(10)})
	h.must(Update{RequestID: "a", Kind: KindFinished, Side: SideEngine, Time: ms(20), FinishReason: "stop"})
	s := h.statsOf("a")
	if s.FinishReason != "stop" {
		t.Fatalf("a finished %q, want stop", s.FinishReason)
	}
	wantLatency(t, "e2e", s.E2ELatency, 20)
}

// The TTL, the hold window and the wait for a side count on the live
// clock, from when each update came, not from the update's own time.
func TestLiveExpiryOnTrackerClock(t *testing.T) {
	h, now := newLiveHarness(t, WithRequestTTL(time.Minute), WithHoldWindow(2*time.Second), WithFrontendGrace(2*time.Second))
	old := now.Add(-time.Hour) // a producer whose updates carry old times
	h.must(Update{RequestID: "old", Kind: KindArrived, Time: old, Model: "m"})
	h.must(Update{RequestID: "held", Kind: KindQueued, Time: old}) // before its ARRIVED
	h.tr.Sweep(now.Add(time.Second))
	if len(h.stats) != 0 || h.rejects(ReasonUnknownRequest) != 0 {
		t.Fatalf("expired on the updates' own (old) times: %d stats, %d unknown", len(h.stats), h.rejects(ReasonUnknownRequest))
	}
	h.tr.Sweep(now.Add(3 * time.Second))
	if h.rejects(ReasonUnknownRequest) != 1 {
		t.Fatalf("the held update did not expire after the hold window of the live clock")
	}
	h.tr.Sweep(now.Add(61 * time.Second))
	if s := h.statsOf("old"); s.FinishReason != FinishAbandoned {
		t.Fatalf("old ended %q, want abandoned after the TTL on the live clock", s.FinishReason)
	}
}

// The live clock moves at each sweep, so it lags the wall by up to the
// sweep interval (an hour here); an update stamped now must not be
// refused as ahead of it under a bound shorter than that lag.
func TestLiveAheadBoundShorterThanSweep(t *testing.T) {
	h, _ := newLiveHarness(t, WithMaxClockAhead(20*time.Millisecond))
	time.Sleep(60 * time.Millisecond) // the wall moves past the bound; the clock does not
	now := time.Now()
	h.must(Update{RequestID: "a", Kind: KindArrived, Time: now, Model: "m"})
	h.must(Update{RequestID: "a", Kind: KindQueued, Time: now.Add(time.Millisecond)})
	if err := h.tr.Record(Update{RequestID: "b", Kind: KindArrived, Time: time.Now().Add(time.Minute), Model: "m"}); !errors.Is(err, ReasonBadTimestamp) {
		t.Fatalf("an ARRIVED a minute ahead: %v, want bad_timestamp", err)
	}
}
