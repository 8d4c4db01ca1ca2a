package otelstats

import (
	"errors"
	"testing"
)

// TestFirstRunBoundByPrompt (SPEC §1: cached ≤ computed ≤ prompt +
// generated): a request's first run is scheduled before any token is
// generated, so its PREFILLING may compute at most the prompt, whatever
// order the two sides' updates reach the tracker in. Frontend deliveries
// that came first — the frontend's stream ahead while no engine had
// reported (their times are not kept), or stamped before the PREFILLING by
// a frontend clock behind the engine's — are tokens of that run, not
// tokens generated before it. Counting them let a PREFILLING of 8 cached
// tokens through for a 5-token prompt: num_cached_tokens 8, more
// prefix-cache hits than queries, a hit ratio of 1.6.
func TestFirstRunBoundByPrompt(t *testing.T) {
	bad := prefilling("r", 3, 8, 8) // 8 computed, all cached, of a 5-token prompt
	fe := []Update{arrived("r", 0, "m", "chat"), inputProcessed("r", 1, 5), detok("r", 10, 3, 0), detok("r", 11, 3, 0)}
	en := []Update{queued("r", 2), bad}
	skewed := detok("r", 2.5, 3, 0) // the frontend's clock behind the engine's
	for _, c := range []struct {
		name      string
		ops       []Update
		connected bool
	}{
		{"time order", []Update{fe[0], fe[1], en[0], en[1], fe[2], fe[3]}, false},
		{"frontend's stream first, engine not present", append(append([]Update{}, fe...), en...), false},
		{"frontend's stream first, engine connected", append(append([]Update{}, fe...), en...), true},
		{"delivery stamped before the PREFILLING", []Update{fe[0], fe[1], en[0], skewed, bad}, false},
		{"a further chunk", []Update{fe[0], fe[1], fe[2], en[0], prefilling("r", 2.5, 4, 4), bad}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if c.connected {
				defer h.tr.SideConnected(SideEngine)()
			}
			var rejected error
			for _, u := range c.ops {
				if err := h.tr.Record(u); err != nil {
					if u.Kind != KindPrefilling || u.NumComputedTokens != 8 {
						t.Fatalf("Record(%v at %vms): %v", u.Kind, msSince(u.Time), err)
					}
					rejected = err
				}
			}
			if !errors.Is(rejected, ReasonComputedExceedsTokens) {
				t.Errorf("the PREFILLING of 8 tokens: %v, want computed_exceeds_tokens", rejected)
			}
			h.must(feFinished("r", 12, "stop"))
			h.tr.Flush()
			s := h.statsOf("r")
			if s.NumCachedTokens.Valid && s.NumCachedTokens.N > 5 {
				t.Errorf("num_cached_tokens = %d > 5 prompt tokens", s.NumCachedTokens.N)
			}
			if q, hits := h.counter("llm.server.prefix_cache.queries"), h.counter("llm.server.prefix_cache.hits"); hits > q {
				t.Errorf("prefix-cache hits %d > queries %d", hits, q)
			}
		})
	}
}
