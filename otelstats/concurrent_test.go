package otelstats

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestConcurrentRequests: frontends on many goroutines (handles), engine
// loops recording Steps, and sweeps, all at once; under -race this checks
// the tracker's locking. Every request is a copy of the plain scenario
// shifted in time, so every one must finish with the same stats.
func TestConcurrentRequests(t *testing.T) {
	const workers, perWorker = 8, 40
	// Workers drift apart in recorded time; a long grace keeps sweeps
	// driven by one worker's clock from ending another's wait early.
	h := newHarness(t, WithFrontendGrace(time.Hour))
	tr := h.tr
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				id := fmt.Sprintf("w%d-%d", w, i)
				off := float64(i * 100) // each request 100 ms after the previous
				q, err := tr.Arrive(context.Background(), id, Arrival{Time: at(off), Model: "m"})
				if err != nil {
					t.Error(err)
					return
				}
				must := func(err error) {
					if err != nil {
						t.Error(err)
					}
				}
				must(q.InputProcessed(at(off+1), 10, nil))
				must(tr.Step(&Step{Time: at(off + 2), Queued: []string{id}}))
				must(tr.Step(&Step{Time: at(off + 5), Scheduled: []Scheduled{{RequestID: id, ComputedTokens: 10, CachedTokens: 4}}}))
				for k := range 3 {
					tok := off + 20 + float64(10*k)
					must(tr.Step(&Step{Time: at(tok), Decoded: []Decoded{{RequestID: id, NewTokens: 1}}}))
					must(q.Detokenized(at(tok+1), 1, 0))
				}
				must(tr.Step(&Step{Time: at(off + 40), Finished: []Finished{{RequestID: id, Reason: "stop"}}}))
				must(q.Finish(at(off+42), "stop"))
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			tr.Sweep(at(float64(i * 20)))
		}
	})
	wg.Wait()
	if n := tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d", n)
	}
	if len(h.stats) != workers*perWorker {
		t.Fatalf("%d finished, want %d", len(h.stats), workers*perWorker)
	}
	for _, s := range h.stats {
		// ttft 21 - 0, e2e 42, decode 42 - 21, tpot 21 / 2, queue 5 - 2.
		wantLatency(t, s.RequestID+" ttft", s.FirstTokenLatency, 21)
		wantLatency(t, s.RequestID+" e2e", s.E2ELatency, 42)
		wantLatency(t, s.RequestID+" tpot", s.TimePerOutputToken, 10.5)
		wantLatency(t, s.RequestID+" queue", s.QueueDuration, 3)
		if t.Failed() {
			t.FailNow()
		}
	}
	h.wantCounter(attributes.MetricRequests, workers*perWorker)
	h.wantCounter(attributes.MetricRejectedUpdates, 0)
	h.wantHist(attributes.MetricTimeToFirstToken, workers*perWorker, 21*workers*perWorker)
	if n := len(h.rec.Ended()); n != workers*perWorker*6 { // root + input, queue, prefill, decode, detokenize
		t.Errorf("%d spans, want %d", n, workers*perWorker*6)
	}
}
