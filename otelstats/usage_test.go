package otelstats

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

// A frontend that sees no engine (a proxy in front of a remote server)
// carries the cached prompt tokens of the response's usage to
// RequestStats and the root's gen_ai.usage.cache_read.input_tokens; they
// are no prefix-cache query or hit of the engine (SPEC §4) and no
// llm.prefix_cache.hit_ratio. The engine's own count wins when it gave one.
func TestCachedTokensFromUsage(t *testing.T) {
	h := newHarness(t)
	q, err := h.tr.Arrive(context.Background(), "u", Arrival{Time: at(0), Model: "m", FrontendFinishes: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CachedTokens(6); err != nil {
		t.Fatal(err)
	}
	if err := q.Record(Update{Kind: KindFinished, Time: at(10), FinishReason: "stop", NumPromptTokens: 10, NumOutputTokens: 3}); err != nil {
		t.Fatal(err)
	}
	s := h.statsOf("u")
	if !s.NumCachedTokens.Valid || s.NumCachedTokens.N != 6 || !s.CachedFromUsage {
		t.Errorf("cached %+v from usage %v, want 6 from the usage", s.NumCachedTokens, s.CachedFromUsage)
	}
	if b, _ := json.Marshal(&s); !strings.Contains(string(b), `"num_cached_tokens":6,"cached_from_usage":true`) {
		t.Errorf("JSON %s", b)
	}
	root, _ := h.treeOf(s)
	if v, ok := attrOf(root.Attributes(), attributes.UsageCacheReadInput); !ok || v.AsInt64() != 6 {
		t.Errorf("cache_read.input_tokens = %v, %v; want 6", v, ok)
	}
	if _, ok := attrOf(root.Attributes(), attributes.PrefixCacheHitRatio); ok {
		t.Error("a usage's cached tokens set llm.prefix_cache.hit_ratio")
	}
	if n := h.counter("llm.server.prefix_cache.hits"); n != 0 {
		t.Errorf("prefix-cache hits %d, want 0: the usage's count is not the engine's", n)
	}
	if q.CachedTokens(1) == nil {
		t.Error("CachedTokens after the request finished succeeded")
	}

	// 0 is a count.
	q0, _ := h.tr.Arrive(context.Background(), "z", Arrival{Time: at(0), Model: "m"})
	_ = q0.CachedTokens(0)
	_ = q0.Finish(at(5), "stop")
	if s := h.statsOf("z"); !s.NumCachedTokens.Valid || s.NumCachedTokens.N != 0 {
		t.Errorf("cached %+v, want a valid 0", s.NumCachedTokens)
	}

	// The engine's count at the first scheduling wins.
	qe, _ := h.tr.Arrive(context.Background(), "e", Arrival{Time: at(0), Model: "m", FrontendFinishes: true})
	_ = qe.InputProcessed(at(1), 10, nil)
	h.must(Update{RequestID: "e", Kind: KindQueued, Time: at(2)})
	h.must(Update{RequestID: "e", Kind: KindPrefilling, Time: at(3), NumComputedTokens: 10, NumCachedTokens: 4})
	h.must(Update{RequestID: "e", Kind: KindDecoding, Time: at(4)})
	h.must(Update{RequestID: "e", Kind: KindFinished, Side: SideEngine, Time: at(5), FinishReason: "stop"})
	_ = qe.CachedTokens(8)
	_ = qe.Finish(at(6), "stop")
	s = h.statsOf("e")
	if s.NumCachedTokens.N != 4 || s.CachedFromUsage {
		t.Errorf("cached %+v from usage %v, want the engine's 4", s.NumCachedTokens, s.CachedFromUsage)
	}
	if n := h.counter("llm.server.prefix_cache.hits"); n != 4 {
		t.Errorf("prefix-cache hits %d, want the engine's 4", n)
	}

	if q.CachedTokens(-1) == nil {
		t.Error("a negative count was accepted")
	}
}

// The frontend's FINISHED carries each choice's finish reason (n > 1): the
// root lists them all, in choice order; the request's FinishReason (the
// metrics' llm.finish_reason) stays the one FINISHED gave. They are
// capped, and dropped when the request ends otherwise.
func TestChoiceFinishReasons(t *testing.T) {
	h := newHarness(t)
	q, _ := h.tr.Arrive(context.Background(), "n2", Arrival{Time: at(0), Model: "m"})
	reasons := []string{"length", "stop"}
	if err := q.Record(Update{Kind: KindFinished, Time: at(5), FinishReason: "stop", FinishReasons: reasons}); err != nil {
		t.Fatal(err)
	}
	reasons[0] = "changed" // the tracker copied them
	s := h.statsOf("n2")
	if s.FinishReason != "stop" || !slices.Equal(s.FinishReasons, []string{"length", "stop"}) {
		t.Errorf("finish %q %q", s.FinishReason, s.FinishReasons)
	}
	root, _ := h.treeOf(s)
	if v, _ := attrOf(root.Attributes(), attributes.FinishReasons); !slices.Equal(v.AsStringSlice(), []string{"length", "stop"}) {
		t.Errorf("gen_ai.response.finish_reasons = %q", v.AsStringSlice())
	}
	// The list does not say which is the request's: the root says it too,
	// so the fleet connector labels as the metrics do.
	if v, _ := attrOf(root.Attributes(), attributes.FinishReason); v.AsString() != "stop" {
		t.Errorf("llm.finish_reason on the root = %q, want stop", v.AsString())
	}
	if b, _ := json.Marshal(&s); !strings.Contains(string(b), `"finish_reason":"stop","finish_reasons":["length","stop"]`) {
		t.Errorf("JSON %s", b)
	}
	h.wantCounter("llm.server.requests", 1, attributes.FinishReason.String("stop"))

	many := make([]string, MaxChoiceFinishReasons+4)
	for i := range many {
		many[i] = "stop"
	}
	many[0] = strings.Repeat("x", MaxNameLength+10)
	q2, _ := h.tr.Arrive(context.Background(), "many", Arrival{Time: at(0), Model: "m"})
	_ = q2.Record(Update{Kind: KindFinished, Time: at(5), FinishReason: "stop", FinishReasons: many})
	s = h.statsOf("many")
	if len(s.FinishReasons) != MaxChoiceFinishReasons || len(s.FinishReasons[0]) != MaxNameLength {
		t.Errorf("%d reasons kept, the first %d bytes; want %d, %d", len(s.FinishReasons), len(s.FinishReasons[0]), MaxChoiceFinishReasons, MaxNameLength)
	}
	if n := h.counter("llm.attributes.truncated", attributes.TruncatedKey.String(string(attributes.FinishReasons))); n < 2 {
		t.Errorf("%d truncations counted, want 2", n)
	}

	// An engine's failure ends the request otherwise: the choices' reasons
	// are not the request's.
	h2 := newHarness(t, WithFrontendGrace(0))
	q3, _ := h2.tr.Arrive(context.Background(), "ab", Arrival{Time: at(0), Model: "m"})
	_ = q3.Record(Update{Kind: KindFinished, Time: at(5), FinishReason: "stop", FinishReasons: []string{"length", "stop"}})
	if s := h2.statsOf("ab"); s.FinishReasons == nil {
		t.Error("the frontend's reasons were dropped")
	}
	q4, _ := h2.tr.Arrive(context.Background(), "ev", Arrival{Time: at(0), Model: "m"})
	_ = q4
	h2.must(Update{RequestID: "ev", Kind: KindFinished, Side: SideEngine, Time: at(5), FinishReason: "abort"})
	if s := h2.statsOf("ev"); s.FinishReasons != nil {
		t.Errorf("reasons %q without the frontend's FINISHED", s.FinishReasons)
	}
}
