package otelstats

import (
	"strconv"
	"sync/atomic"
	"time"
)

// The tracker's idea of now, which decides expiry — the wait for a side's
// FINISHED, the hold of updates that precede their ARRIVED, the request TTL
// and whether a side is present — never the span tree or a number, which
// always come from the updates' own times.
//
// Without WithAutoSweep it is recorded time: the latest update time seen
// (the high-water mark), so a simulation or a replayed log expires on its
// own clock. With WithAutoSweep the tracker is live and keeps its own
// clock, advanced by the sweep goroutine: times taken from input never move
// it, so one producer with a skewed clock cannot end everyone else's
// requests (issue 12.3), and an update far ahead of it is rejected.

// presenceWindow is how long a side stays present after the tracker last
// accepted one of its updates (SPEC §1: "within the last minute").
const presenceWindow = int64(time.Minute)

// seenSlack bounds how often a side's last-seen time is written: every
// update reads it, and a write per token would make every goroutine bounce
// one cache line. A millisecond keeps the window within a millisecond of
// SPEC §1's minute (at most a thousand writes a second).
const seenSlack = int64(time.Millisecond)

// presence is what the tracker knows of the two sides.
type presence struct {
	seen  [3]atomic.Int64 // by Side: when the tracker last accepted an update, in now()'s terms
	conns [3]atomic.Int32 // by Side: producers connected now (SideConnected)
}

// now is the tracker's current time for expiry; ns is the time of the
// update asking, when there is one (0 otherwise), which in recorded-time
// mode may be ahead of the lagging high-water mark.
func (t *Tracker) now(ns int64) int64 {
	if t.live {
		return t.clock.Load()
	}
	return max(t.hwm.Load(), ns)
}

// tick advances the live clock; the sweep goroutine calls it.
func (t *Tracker) tick(now time.Time) int64 {
	ns := t.ns(now)
	for {
		old := t.clock.Load()
		if ns <= old || t.clock.CompareAndSwap(old, ns) {
			return max(ns, old)
		}
	}
}

// inBound reports whether ns is a time the tracker accepts: a valid time
// and, when live, not further ahead of the tracker's clock than
// WithMaxClockAhead allows.
func (t *Tracker) inBound(ns int64) bool {
	return validNs(ns) && (!t.live || t.ahead(ns) <= t.aheadNs)
}

// ahead is how far ns is ahead of the live clock. The clock moves only at
// each sweep, so it lags the wall by up to the sweep interval; a time
// past the bound is measured again against the wall before it is refused,
// or an honest update would be rejected under a WithMaxClockAhead shorter
// than that interval. Only the refusal path reads the wall.
func (t *Tracker) ahead(ns int64) int64 {
	if d := ns - t.clock.Load(); d <= t.aheadNs {
		return d
	}
	return ns - t.tick(time.Now())
}

// aheadReject is the rejection of an update too far ahead of the live
// clock, or nil.
func (t *Tracker) aheadReject(u *Update, side Side, ns int64) *RejectError {
	if !t.live {
		return nil
	}
	if d := t.ahead(ns); d > t.aheadNs {
		return reject(u, side, ReasonBadTimestamp, time.Duration(d).Round(time.Millisecond).String()+
			" ahead of the tracker's clock (more than "+strconv.FormatInt(t.aheadNs/1e6, 10)+" ms: a skewed producer clock?)")
	}
	return nil
}

// saw marks side as present at now.
func (t *Tracker) saw(side Side, now int64) {
	if s := &t.sides.seen[side]; now > s.Load()+seenSlack {
		s.Store(now)
	}
}

// present reports whether side is present at now (SPEC §1): a producer of
// that side is connected, or the tracker accepted one of its updates within
// the last minute. ARRIVED does not count: an engine that records its
// requests' arrivals itself, with no frontend reporting, would otherwise
// make every request wait the grace period for a frontend that does not
// exist, and SPEC §1's "when only one side reports, that one ends the
// request" would never apply.
func (t *Tracker) present(side Side, now int64) bool {
	if t.sides.conns[side].Load() > 0 {
		return true
	}
	s := t.sides.seen[side].Load()
	return s != 0 && now-s < presenceWindow+seenSlack
}

// SideConnected records that a producer of side (SideFrontend or
// SideEngine) is connected — a collector calls it when a producer's
// connection is known to carry that side's updates — and returns the
// function to call when it disconnects. While connected, the side is
// present (SPEC §1): a request the other side finishes waits, within the
// grace period, for this side's late updates.
func (t *Tracker) SideConnected(side Side) (disconnected func()) {
	if side != SideFrontend && side != SideEngine {
		return func() {}
	}
	t.sides.conns[side].Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			t.sides.conns[side].Add(-1)
		}
	}
}
