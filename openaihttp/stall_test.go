package openaihttp

import (
	"testing"
	"time"
)

func TestStallDetector(t *testing.T) {
	d := newStallDetector(StallPolicy{})
	for _, g := range []time.Duration{10, 10, 10} {
		if stall, _ := d.add(g * time.Millisecond); stall {
			t.Fatal("stall before MinGaps")
		}
	}
	// Not above Min even if 8× the median.
	if stall, _ := d.add(90 * time.Millisecond); stall {
		t.Error("90ms stall")
	}
	if stall, med := d.add(time.Second); !stall || med != 10*time.Millisecond {
		t.Errorf("1s gap: stall=%v median=%v", stall, med)
	}
	// Jitter around the median is not a stall.
	d = newStallDetector(StallPolicy{})
	for i := range 100 {
		if stall, _ := d.add(time.Duration(5+i%3*5) * time.Millisecond); stall {
			t.Fatalf("jitter stall at %d", i)
		}
	}
	// The window slides.
	d = newStallDetector(StallPolicy{Window: 4, MinGaps: 2})
	for range 10 {
		d.add(time.Second)
	}
	for range 4 {
		d.add(time.Millisecond)
	}
	if m, _ := d.median(); m != time.Millisecond || len(d.sorted) != 4 {
		t.Errorf("median %v of %v", m, d.sorted)
	}
	// At most maxStallEvents events, every stall counted.
	d = newStallDetector(StallPolicy{})
	for i := range 8 * maxStallEvents {
		g := time.Millisecond
		if i%4 == 3 {
			g = time.Second
		}
		d.gap(g, time.Now(), i+1)
	}
	// The first long gap comes with three gaps known, one short of MinGaps.
	if d.count != 2*maxStallEvents-1 || len(d.events) != maxStallEvents {
		t.Errorf("%d stalls, %d events", d.count, len(d.events))
	}
}
