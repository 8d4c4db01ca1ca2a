package transport

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogLimit: at most logLinesPerSecond lines a second; the first line
// of a later second reports how many were suppressed.
func TestLogLimit(t *testing.T) {
	var l logLimit
	t0 := time.Unix(1_700_000_000, 0)
	allowed := 0
	for i := range 1000 {
		if ok, s := l.allow(t0.Add(time.Duration(i) * time.Microsecond)); ok {
			allowed++
			if s != 0 {
				t.Fatalf("line %d reports %d suppressed", i, s)
			}
		}
	}
	if allowed != logLinesPerSecond {
		t.Fatalf("%d lines allowed in one second, want %d", allowed, logLinesPerSecond)
	}
	ok, s := l.allow(t0.Add(time.Second))
	if !ok || s != 1000-logLinesPerSecond {
		t.Fatalf("the next second: allowed %v, %d suppressed; want true, %d", ok, s, 1000-logLinesPerSecond)
	}
	if ok, s := l.allow(t0.Add(time.Second + time.Millisecond)); !ok || s != 0 {
		t.Fatalf("then: %v, %d", ok, s)
	}
}

// TestStreamEndLinesBounded: a producer that connects and leaves in a loop
// costs the collector a bounded number of log lines; every stream is still
// counted.
func TestStreamEndLinesBounded(t *testing.T) {
	var out lockedBuf
	e := newEnv(t, Config{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	const n = 200
	start := time.Now()
	for range n {
		c := e.dial()
		_, _ = c.Write([]byte("\n")) // a ping: the stream is read, then ends
		c.Close()
	}
	wait(t, "every stream ended", func() bool { return e.c.Stats().Streams >= n && e.c.Stats().ActiveStreams == 0 })
	secs := int(time.Since(start)/time.Second) + 1
	lines := strings.Count(out.String(), `msg="stream ended`)
	if lines == 0 || lines > logLinesPerSecond*(secs+1) {
		t.Fatalf("%d stream-end lines for %d streams in under %d s, want 1 to %d", lines, n, secs, logLinesPerSecond*(secs+1))
	}
}
