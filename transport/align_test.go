package transport

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestProducerClocks: a producer clock keeps its first alignment; another
// clock of the same name, a wall-only HELLO, and clocks beyond the bounds
// are measured on their own.
func TestProducerClocks(t *testing.T) {
	var p producerClocks
	const s = int64(time.Second)
	h := Hello{Producer: "e", WallNs: 1_700_000_000 * s, MonoNs: 5 * s}
	if got := p.offset(h, true, h.WallNs+30*int64(time.Millisecond)); got != 30*int64(time.Millisecond) {
		t.Fatalf("first HELLO: offset %d", got)
	}
	// The same producer 10 s later, its HELLO delivered at once.
	later := Hello{Producer: "e", WallNs: h.WallNs + 10*s + 500, MonoNs: h.MonoNs + 10*s}
	if got := p.offset(later, true, later.WallNs); got != 30*int64(time.Millisecond) {
		t.Errorf("the producer's next HELLO: offset %d, want the first one's", got)
	}
	// Another process of the same name: another clock.
	other := Hello{Producer: "e", WallNs: h.WallNs, MonoNs: 900 * s}
	if got := p.offset(other, true, other.WallNs+7); got != 7 {
		t.Errorf("another clock: offset %d", got)
	}
	// A wall-only HELLO: the producer's wall clock, known by its name.
	if got := p.offset(Hello{Producer: "e", WallNs: h.WallNs - h.MonoNs}, false, h.WallNs); got != h.MonoNs {
		t.Errorf("wall-only HELLO: offset %d", got)
	}
	if got := p.offset(Hello{Producer: "e", WallNs: h.WallNs + s}, false, h.WallNs+s+1); got != h.MonoNs {
		t.Errorf("the wall-only producer's next HELLO: offset %d, want the first one's", got)
	}
	// Extreme readings neither overflow nor match what they should not.
	for _, x := range []Hello{{WallNs: math.MaxInt64, MonoNs: 0}, {WallNs: 1, MonoNs: math.MaxInt64}} {
		x.Producer = "x"
		_ = p.offset(x, true, 0)
	}
	if got := p.offset(Hello{Producer: "x", WallNs: 1, MonoNs: math.MaxInt64 - 2*sameClockNs}, true, 5); got != 4 {
		t.Errorf("extreme clocks: offset %d", got)
	}
	// Bounds.
	for i := range maxClocksPerName + 3 {
		p.offset(Hello{Producer: "many", WallNs: h.WallNs, MonoNs: int64(i) * s}, true, h.WallNs)
	}
	if n := len(p.by["many"]); n != maxClocksPerName {
		t.Errorf("%d clocks kept for one name", n)
	}
	for i := range 2 * maxClocks {
		p.offset(Hello{Producer: fmt.Sprint(i), WallNs: h.WallNs, MonoNs: s}, true, h.WallNs)
	}
	for i := range maxClocks {
		p.offset(Hello{Producer: fmt.Sprint("w", i), WallNs: h.WallNs}, false, h.WallNs)
	}
	if p.n > maxClocks || p.n != countClocks(&p) {
		t.Errorf("%d clocks kept (counted %d), bound %d", countClocks(&p), p.n, maxClocks)
	}
}

func countClocks(p *producerClocks) int {
	n := 0
	for _, l := range p.by {
		n += len(l)
	}
	return n + len(p.wall)
}
