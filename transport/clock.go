package transport

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// streamClock maps one stream's timestamps onto wall time (SPEC §5).
type streamClock struct {
	anchored bool
	wallNs   int64 // the anchor's wall reading
	monoNs   int64 // the anchor's monotonic reading
	offset   int64 // added to every time (AlignClocks)
}

// hello sets the anchor; recvNs is the collector's wall clock when the HELLO
// arrived, used when align is set.
func (c *streamClock) hello(h Hello, recvNs int64, align bool) {
	c.anchored = true
	c.wallNs, c.monoNs = h.WallNs, h.MonoNs
	c.offset = 0
	if align {
		c.offset = recvNs - h.WallNs
	}
}

// wall maps s; ok is false for a monotonic time without an anchor.
func (c *streamClock) wall(s Stamp) (time.Time, bool) {
	ns := s.Ns
	if s.Mono {
		if !c.anchored {
			return time.Time{}, false
		}
		ns = c.wallNs + (s.Ns - c.monoNs)
	}
	return time.Unix(0, ns+c.offset).UTC(), true
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
		if err != nil || math.IsNaN(f) || f < 0 || f > math.MaxInt64/1e9 {
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
