package otelstats

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §1 and §9: an encoder run's ENCODED may come after the prefill's
// first token. When the client reuses the request's id while the request,
// finished on the frontend, waits for its engine, that late ENCODED (stamped
// before the new request arrived) is the waiting request's, as it would
// have been in time order: it closes its run, it is not handed to the new
// request and rejected there.
func TestLateEncodedOfRequestWaitingBesideItsSuccessor(t *testing.T) {
	h := newHarness(t)
	defer h.tr.SideConnected(SideEngine)()
	h.feed([]Update{arrived("r", 0, "m", "chat"), inputProcessed("r", 1, 10), queued("r", 2), encoding("r", 3, 1, 5),
		prefilling("r", 4, 10, 0), decoding("r", 6, 1), detok("r", 7, 1, 0), feFinished("r", 8, "abort"),
		arrived("r", 9, "m", "chat")}) // the client's retry, same id
	if err := h.tr.Record(encoded("r", 6.5, true)); err != nil {
		t.Fatalf("the waiting request's late ENCODED: %v", err)
	}
	h.must(enFinished("r", 8.5, "abort"))
	h.must(feFinished("r", 10, "abort")) // the retry's
	h.tr.Flush()
	if len(h.stats) != 2 {
		t.Fatalf("%d requests finished, want 2", len(h.stats))
	}
	first, retry := h.stats[0], h.stats[1]
	if first.ArrivalTime.After(retry.ArrivalTime) {
		first, retry = retry, first
	}
	if first.NumEncoderRuns != 1 || retry.NumEncoderRuns != 0 {
		t.Fatalf("encoder runs %d and %d, want 1 and 0", first.NumEncoderRuns, retry.NumEncoderRuns)
	}
	wantLatency(t, "encode_duration (ends by the first token)", first.EncodeDuration, 3)
	_, kids := h.treeOf(first)
	var enc int
	for _, k := range kids {
		if k.Name() == attributes.SpanEncode {
			enc++
			checkAttrs(t, "llm.encode", k.Attributes(), []attribute.KeyValue{attributes.EncodeCacheHit.Bool(true)})
		}
	}
	if enc != 1 {
		t.Fatalf("%d llm.encode spans, want 1", enc)
	}
	if n := h.rejects(""); n != 0 {
		t.Errorf("%d updates rejected", n)
	}
}
