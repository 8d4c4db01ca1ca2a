package reconstruct

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

var fourChildren = []spans.Span{{Name: attributes.SpanInputProcessing}, {Name: attributes.SpanQueue},
	{Name: attributes.SpanPrefill}, {Name: attributes.SpanDecode}}

// The derivation is what its doc says, byte for byte: another
// implementation (or a later version, behind a collector replica still on
// this one) must give a re-delivered span the same children.
func TestChildSpanIDsAreTheDocumentedHash(t *testing.T) {
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	parent := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	got := ChildSpanIDs(nil, tid, parent, fourChildren)
	for i, c := range fourChildren {
		b := append([]byte("llmtrace.reconstruct.child.v1\x00"), tid[:]...)
		b = append(b, parent[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint32(b, 0)
		sum := sha256.Sum256(append(b, c.Name...))
		if want := trace.SpanID(sum[:8]); got[i] != want {
			t.Errorf("%s: %v, want %v", c.Name, got[i], want)
		}
	}
	// Pinned: a change here changes every rebuilt child's id, and spans
	// re-delivered across versions would no longer collapse.
	if got[0].String() != "46d091c03548770d" {
		t.Errorf("%s's id is %v", fourChildren[0].Name, got[0])
	}
}

func TestChildSpanIDsDependOnTheEngineSpan(t *testing.T) {
	a := ChildSpanIDs(nil, trace.TraceID{1}, trace.SpanID{2}, fourChildren)
	b := ChildSpanIDs(nil, trace.TraceID{1}, trace.SpanID{3}, fourChildren)
	c := ChildSpanIDs(nil, trace.TraceID{9}, trace.SpanID{2}, fourChildren)
	again := ChildSpanIDs(make([]trace.SpanID, 1, 8), trace.TraceID{1}, trace.SpanID{2}, fourChildren)[1:]
	for i := range fourChildren {
		if a[i] == b[i] || a[i] == c[i] {
			t.Errorf("child %d has id %v under another engine span", i, a[i])
		}
		if a[i] != again[i] {
			t.Errorf("child %d: %v, then %v", i, a[i], again[i])
		}
	}
}

// Whatever the hash gives, an id is never zero, the parent's or a
// sibling's: ChildSpanIDs derives again with the next attempt.
func TestChildSpanIDsStepAroundCollisions(t *testing.T) {
	parent := trace.SpanID{7}
	defer func(f func(trace.TraceID, trace.SpanID, int, int, string) trace.SpanID) { deriveSpanID = f }(deriveSpanID)
	deriveSpanID = func(_ trace.TraceID, _ trace.SpanID, i, attempt int, _ string) trace.SpanID {
		switch attempt {
		case 0:
			return [...]trace.SpanID{{}, parent, {5}, {5}}[i] // zero, the parent's, then twice the same
		default:
			return trace.SpanID{byte(10*i + attempt)}
		}
	}
	got := ChildSpanIDs(nil, trace.TraceID{1}, parent, fourChildren)
	want := []trace.SpanID{{1}, {11}, {5}, {31}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("child %d: %v, want %v", i, got[i], want[i])
		}
	}
}
