package transport

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxWallNs is the latest time an update may carry once mapped onto wall
// time: the start of the year 2200, the update log's own bound.
var maxWallNs = maxTS * 1_000_000_000

// clockErr says why a stamp could not be mapped onto wall time.
type clockErr uint8

const (
	clockOK         clockErr = iota
	clockNoAnchor            // a monotonic time before any HELLO
	clockOutOfRange          // the mapping leaves (1970, 2200]
)

// streamClock maps one stream's timestamps onto wall time (SPEC §5).
type streamClock struct {
	anchored bool
	wallNs   int64 // the anchor's wall reading
	monoNs   int64 // the anchor's monotonic reading
	offset   int64 // added to every time (AlignClocks)
	aligned  bool  // offset is set; it never moves within a stream
}

// hello sets the anchor; recvNs is the collector's wall clock when the HELLO
// arrived, used when align is set. The alignment is taken at the stream's
// first HELLO only, so a later HELLO (a keep-alive, a re-anchor) never moves
// a side's times against each other.
func (c *streamClock) hello(h Hello, recvNs int64, align bool) {
	c.anchor(h)
	if align && !c.aligned {
		c.align(alignOffset(h, recvNs))
	}
}

// anchor sets the anchor of the stream's monotonic times.
func (c *streamClock) anchor(h Hello) {
	c.anchored = true
	c.wallNs, c.monoNs = h.WallNs, h.MonoNs
}

// align sets the offset added to every time of the stream.
func (c *streamClock) align(offset int64) {
	c.offset = offset
	c.aligned = true
}

// alignOffset is the alignment a HELLO that arrived at recvNs measures:
// what maps its producer's wall clock onto the collector's.
func alignOffset(h Hello, recvNs int64) int64 {
	// Both are non-negative int64s: the difference cannot overflow.
	return recvNs - h.WallNs
}

// producerClocks keeps, for AlignClocks, the alignment each producer clock
// got at its first HELLO, so that the producer's later streams — a
// reconnection, each HTTP body — map its times as its first stream did.
// Measured again at each HELLO, the alignment moves by the difference
// between the two HELLOs' delivery delays, which is as large as the
// collector is slow to read a HELLO (a busy machine, a new HTTP
// connection): a side's updates after the new HELLO could then land before
// its earlier ones (rejected time_backwards) or stretch and shrink its
// intervals. A producer clock is its HELLO's name and the difference
// between its wall and monotonic readings, which is the same in every
// HELLO of one producer (to a millisecond, for one that reads its two
// clocks apart); producers that share both share one clock, so one
// alignment fits them all. A producer of wall times alone (HELLOs without
// a monotonic reading) is known by its name: producers on one host, which
// -align-clocks is for, share one wall clock. It is safe for concurrent
// use.
type producerClocks struct {
	mu   sync.Mutex
	by   map[string][]clockAlign // by producer name
	wall map[string]int64        // wall-only producers' offsets, by name
	n    int
}

// clockAlign is one producer clock's alignment.
type clockAlign struct {
	skew   int64 // the HELLO's wall minus its monotonic reading
	offset int64
}

const (
	// sameClockNs is how far two HELLOs' wall − monotonic differences may
	// be apart for one producer clock.
	sameClockNs = int64(time.Millisecond)
	// maxClocksPerName and maxClocks bound what producerClocks keeps: a
	// name's oldest clock goes first; past maxClocks (a flood of names) it
	// starts over, and a producer that reconnects after that is measured
	// again.
	maxClocksPerName = 8
	maxClocks        = 4096
)

// offset returns the alignment of h's producer clock: the one its first
// HELLO measured, else the one h measures (recvNs is when h arrived),
// which it keeps for the clock's later HELLOs. mono says h carries a
// monotonic reading.
func (p *producerClocks) offset(h Hello, mono bool, recvNs int64) int64 {
	off := alignOffset(h, recvNs)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n >= maxClocks {
		p.by, p.wall, p.n = nil, nil, 0
	}
	if !mono {
		if known, ok := p.wall[h.Producer]; ok {
			return known
		}
		if p.wall == nil {
			p.wall = map[string]int64{}
		}
		p.wall[h.Producer] = off
		p.n++
		return off
	}
	skew := h.WallNs - h.MonoNs // both non-negative: no overflow
	known := p.by[h.Producer]
	for _, a := range known {
		if sameClock(a.skew, skew) {
			return a.offset
		}
	}
	if p.by == nil {
		p.by = map[string][]clockAlign{}
	}
	if len(known) >= maxClocksPerName {
		known = append(known[:0:0], known[1:]...)
		p.n--
	}
	p.by[h.Producer] = append(known, clockAlign{skew: skew, offset: off})
	p.n++
	return off
}

// sameClock reports whether two wall − monotonic differences are one
// clock's, without overflowing.
func sameClock(a, b int64) bool {
	if a > b {
		a, b = b, a
	}
	d := b - a // negative only when the true difference overflowed
	return d >= 0 && d <= sameClockNs
}

// wallNs maps s onto Unix nanoseconds. Values anywhere in int64's range
// (a hostile or broken producer) never overflow: a mapping that leaves
// (1970, 2200] is reported as clockOutOfRange.
func (c *streamClock) mapNs(s Stamp) (int64, clockErr) {
	ns := s.Ns
	if s.Mono {
		if !c.anchored {
			return 0, clockNoAnchor
		}
		var ok bool
		// s.Ns and c.monoNs are both non-negative: their difference fits.
		if ns, ok = addNs(c.wallNs, s.Ns-c.monoNs); !ok {
			return 0, clockOutOfRange
		}
	}
	ns, ok := addNs(ns, c.offset)
	if !ok || ns <= 0 || ns > maxWallNs {
		return 0, clockOutOfRange
	}
	return ns, clockOK
}

// wall maps s onto wall time.
func (c *streamClock) wall(s Stamp) (time.Time, clockErr) {
	ns, e := c.mapNs(s)
	if e != clockOK {
		return time.Time{}, e
	}
	return time.Unix(0, ns).UTC(), clockOK
}

// addNs adds without overflowing; ok is false when the sum does not fit.
func addNs(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// parseSeconds reads a non-negative decimal number of seconds exactly into
// nanoseconds ("8123.000123456" is 8123000123456 ns, not the nearest
// float64). Exponent forms go through float64.
func parseSeconds(s string) (int64, bool) {
	if s == "" || s[0] == '-' || s[0] == '+' {
		return 0, false
	}
	if strings.ContainsAny(s, "eE") {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f >= math.MaxInt64/1e9 {
			return 0, false
		}
		return int64(math.Round(f * 1e9)), true
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if intPart == "" || len(intPart) > 10 {
		return 0, false
	}
	sec, err := strconv.ParseUint(intPart, 10, 64)
	if err != nil || sec >= math.MaxInt64/1_000_000_000 {
		return 0, false
	}
	var ns int64
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if i < 9 {
			ns = ns*10 + int64(c-'0')
		}
	}
	for i := len(frac); i < 9; i++ {
		ns *= 10
	}
	return int64(sec)*1e9 + ns, true
}
