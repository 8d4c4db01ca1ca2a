package transport

import (
	"sync"
	"time"
)

// logLinesPerSecond bounds the stream-end lines a collector writes: one a
// stream, a producer that reconnects in a loop, or a flood of connections,
// would otherwise write lines without bound (to a disk, a journal). The
// counters and metrics still count every stream.
const logLinesPerSecond = 20

// logLimit allows logLinesPerSecond lines in each second and counts the
// rest, which the next line allowed reports. The zero value is ready; it
// is safe for concurrent use.
type logLimit struct {
	mu         sync.Mutex
	sec        int64 // the second n counts in (Unix)
	n          int
	suppressed int64
}

// allow reports whether a line may be written at now and, if so, how many
// were suppressed since the last one written.
func (l *logLimit) allow(now time.Time) (ok bool, suppressed int64) {
	sec := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	if sec != l.sec {
		l.sec, l.n = sec, 0
	}
	if l.n >= logLinesPerSecond {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
