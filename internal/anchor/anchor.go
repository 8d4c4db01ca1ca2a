// Package anchor is the process's one clock anchor (SPEC §5): a time.Now
// reading, with its monotonic and its wall value, taken once when the
// process starts. Every package that turns a time with a monotonic reading
// into Unix nanoseconds measures it from here, so the spans of a process's
// trackers, proxies and producers share one timeline, even when NTP slews or
// steps the wall clock between the creation of one and of the next.
package anchor

import "time"

var (
	start   = time.Now()
	startNs = start.UnixNano()
)

// Start is the anchor: the process's start, with its monotonic reading.
func Start() time.Time { return start }

// StartUnixNano is the wall time of Start in Unix nanoseconds.
func StartUnixNano() int64 { return startNs }
