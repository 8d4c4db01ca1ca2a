package otelstats

import "testing"

func TestSanityPlain(t *testing.T) {
	h := newHarness(t)
	h.must(Update{RequestID: "a", Kind: KindArrived, Time: at(0), Model: "m", Operation: "chat"})
	h.must(Update{RequestID: "a", Kind: KindInputProcessed, Time: at(1), NumPromptTokens: 10})
	h.must(Update{RequestID: "a", Kind: KindQueued, Time: at(2)})
	h.must(Update{RequestID: "a", Kind: KindPrefilling, Time: at(5), NumComputedTokens: 10, NumCachedTokens: 4})
	h.must(Update{RequestID: "a", Kind: KindDecoding, Time: at(20)})
	h.must(Update{RequestID: "a", Kind: KindDetokenized, Time: at(21), NumNewTokens: 1})
	h.must(Update{RequestID: "a", Kind: KindDecoding, Time: at(30)})
	h.must(Update{RequestID: "a", Kind: KindDetokenized, Time: at(31), NumNewTokens: 1})
	h.must(Update{RequestID: "a", Kind: KindFinished, Side: SideEngine, Time: at(30), FinishReason: "stop"})
	h.must(Update{RequestID: "a", Kind: KindFinished, Time: at(32), FinishReason: "stop"})
	s := h.statsOf("a")
	wantLatency(t, "ttft", s.FirstTokenLatency, 21)
	wantLatency(t, "e2e", s.E2ELatency, 32)
	for _, sp := range h.rec.Ended() {
		t.Logf("%s %v %v %v", sp.Name(), sp.StartTime().Sub(base), sp.EndTime().Sub(base), sp.Attributes())
	}
}
