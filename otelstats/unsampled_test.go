package otelstats

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestUnsampled: with a sampler that drops every trace, no span is recorded
// but every metric still counts every request (SPEC §4, §6).
func TestUnsampled(t *testing.T) {
	for name, sampler := range map[string]sdktrace.Sampler{
		"never":              sdktrace.NeverSample(),
		"parent-based never": sdktrace.ParentBased(sdktrace.NeverSample()),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarnessTP(t, []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler)})
			for _, sc := range scenarios {
				h.feed(sc.ops)
			}
			h.tr.Flush() // ends the scenario that waits for its frontend
			if n := len(h.rec.Started()) + len(h.rec.Ended()); n != 0 {
				t.Fatalf("%d spans recorded with %s", n, sampler.Description())
			}
			if len(h.stats) != len(scenarios) {
				t.Fatalf("%d requests finished, want %d", len(h.stats), len(scenarios))
			}
			// The sampler's decision is the trace's: a hook adding spans to
			// kept traces must not see these as kept.
			for _, s := range h.stats {
				if s.Sampled || s.SamplingReason != NotSampled {
					t.Errorf("%s: Sampled %v, reason %q; want false, %q", s.RequestID, s.Sampled, s.SamplingReason, NotSampled)
				}
			}
			// Expected totals, summed from the scenarios' hand-computed stats.
			var (
				nTTFT, nTPOT, nQueue, nPrefill, nDecode, nInf, nITL       uint64
				sTTFT, sE2E, sTPOT, sQueue, sPrefill, sDecode, sInf, sITL float64
				pre, out, prompt                                          int64
				byReason                                                  = map[string]int64{}
			)
			add := func(n *uint64, s *float64, v float64) {
				if v >= 0 {
					*n++
					*s += v
				}
			}
			for _, sc := range scenarios {
				w := sc.stats
				checkStats(t, h.statsOf(sc.id), w)
				sE2E += w.e2e
				add(&nTTFT, &sTTFT, w.ttft)
				add(&nTPOT, &sTPOT, w.tpot)
				add(&nQueue, &sQueue, w.queue)
				add(&nPrefill, &sPrefill, w.prefill)
				add(&nDecode, &sDecode, w.decode)
				add(&nInf, &sInf, w.inference)
				for _, g := range w.itl {
					add(&nITL, &sITL, g)
				}
				pre += int64(w.preemptions)
				out += int64(w.out)
				prompt += int64(max(w.prompt, 0))
				byReason[w.reason]++
			}
			n := uint64(len(scenarios))
			h.wantHist(attributes.MetricRequestDuration, n, sE2E)
			h.wantHist(attributes.MetricTimeToFirstToken, nTTFT, sTTFT)
			h.wantHist(attributes.MetricTimePerOutputToken, nTPOT, sTPOT)
			h.wantHist(attributes.MetricQueueDuration, nQueue, sQueue)
			h.wantHist(attributes.MetricPrefillDuration, nPrefill, sPrefill)
			h.wantHist(attributes.MetricDecodeDuration, nDecode, sDecode)
			h.wantHist(attributes.MetricInferenceDuration, nInf, sInf)
			h.wantHist(attributes.MetricInterTokenLatency, nITL, sITL)
			h.wantCounter(attributes.MetricRequests, int64(n))
			for r, c := range byReason {
				h.wantCounter(attributes.MetricRequests, c, attributes.FinishReason.String(r))
			}
			h.wantCounter(attributes.MetricPreemptions, pre)
			h.wantCounter(attributes.MetricGenerationTokens, out)
			h.wantCounter(attributes.MetricPromptTokens, prompt)
			// Guard the totals themselves, so a changed scenario table is
			// noticed: two scenarios end before any token (abort-queued,
			// abort-prefill); pre-decode, pre-late, pre-prefill,
			// pre-prefill-fe and pre-abort are preempted once, two-pre
			// twice.
			if nTTFT != n-2 || pre != 7 {
				t.Errorf("scenario table changed: %d with TTFT, %d preemptions", nTTFT, pre)
			}
		})
	}
}

// TestNotRecordingProvider: a TracerProvider that samples no root — a
// no-op one, or one shut down — keeps no trace, and RequestStats say so.
func TestNotRecordingProvider(t *testing.T) {
	shut := sdktrace.NewTracerProvider()
	_ = shut.Shutdown(context.Background())
	for name, tp := range map[string]trace.TracerProvider{"no-op": noop.NewTracerProvider(), "shut down": shut} {
		t.Run(name, func(t *testing.T) {
			var got []RequestStats
			tr, err := NewTracker(WithTracerProvider(tp), WithOnFinish(func(s *RequestStats) { got = append(got, *s) }))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			t0 := time.Now()
			q, err := tr.Arrive(context.Background(), "r", Arrival{Time: t0, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Finish(t0.Add(time.Millisecond), FinishStop); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Sampled || got[0].SamplingReason != NotSampled {
				t.Fatalf("stats %+v; want one, not sampled, reason %q", got, NotSampled)
			}
		})
	}
}
