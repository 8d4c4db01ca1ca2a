package reconstruct

import (
	"crypto/sha256"
	"encoding/binary"

	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/spans"
)

// childIDDomain separates the hash of a rebuilt child's id from any other
// use of SHA-256 over trace and span ids. The version changes only if the
// derivation does.
const childIDDomain = "llmtrace.reconstruct.child.v1\x00"

// ChildSpanIDs appends to dst the span ids of the rebuilt children of the
// engine span (traceID, parent), in the order of children (a Tree's
// Spans[1:]), and returns the extended slice.
//
// The ids are derived, not drawn: the i-th child's is the first 8 bytes of
// SHA-256 of "llmtrace.reconstruct.child.v1", a zero byte, the 16 bytes of
// traceID, the 8 of parent, i and attempt as 4-byte big-endian integers,
// and the child's name; attempt is 0. So an engine span delivered
// twice (an exporter retrying a send that arrived) is expanded into the
// same children, by any process, and a backend that keeps one span per id
// shows each phase once. An id that would be zero (invalid), the parent's
// or an earlier child's is derived again with the next attempt, so the
// ids are always valid, distinct, and never the parent's. ChildSpanIDs
// does not allocate when dst has room.
func ChildSpanIDs(dst []trace.SpanID, traceID trace.TraceID, parent trace.SpanID, children []spans.Span) []trace.SpanID {
	first := len(dst)
	for i := range children {
		for attempt := 0; ; attempt++ {
			id := deriveSpanID(traceID, parent, i, attempt, children[i].Name)
			if id.IsValid() && id != parent && !containsID(dst[first:], id) {
				dst = append(dst, id)
				break
			}
		}
	}
	return dst
}

// deriveSpanID hashes one child's identity; a variable in tests, which
// force the collisions ChildSpanIDs must step around.
var deriveSpanID = func(traceID trace.TraceID, parent trace.SpanID, i, attempt int, name string) trace.SpanID {
	var buf [128]byte
	b := append(buf[:0], childIDDomain...)
	b = append(b, traceID[:]...)
	b = append(b, parent[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(i))
	b = binary.BigEndian.AppendUint32(b, uint32(attempt))
	b = append(b, name...)
	sum := sha256.Sum256(b)
	return trace.SpanID(sum[:8])
}

func containsID(ids []trace.SpanID, id trace.SpanID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
