package otelstats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	if n := len(h.rec.Ended()); n != workers*perWorker*7 { // root + input, handoff, queue, prefill, decode, detokenize
		t.Errorf("%d spans, want %d", n, workers*perWorker*7)
	}
}

// TestConcurrentHandlesChaos: real time, real goroutines. Frontends arrive
// (reusing ids), deliver and sometimes finish or vanish; one engine loop
// steps every running request by handle (a third by id), preempts and
// finishes some;
// auto-sweeps end grace waits and abandon idle requests; Shutdown comes
// while all of it still runs. Every accepted arrival must be finalized
// exactly once, every error must be a typed rejection, and nothing may stay
// in flight. Under -race this checks the per-request locking.
func TestConcurrentHandlesChaos(t *testing.T) {
	var finished atomic.Int64
	tr, err := NewTracker(
		WithFrontendGrace(3*time.Millisecond), WithRequestTTL(40*time.Millisecond),
		WithAutoSweep(time.Millisecond), WithMaxInFlight(64),
		WithOnFinish(func(*RequestStats) { finished.Add(1) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	var arrived atomic.Int64
	typed := func(err error) {
		if err != nil && !errors.Is(err, ErrRejected) {
			t.Errorf("untyped error: %v", err)
		}
	}
	stepErr := func(err error) {
		if err == nil {
			return
		}
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			typed(e)
		}
	}
	stop := make(chan struct{})
	toEngine := make(chan *Request, 256)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q, err := tr.Arrive(context.Background(), fmt.Sprintf("f%d-%d", w, i%8), Arrival{Time: time.Now(), Model: "m"})
				typed(err)
				if err != nil {
					continue
				}
				arrived.Add(1)
				typed(q.InputProcessed(time.Now(), 16, nil))
				select {
				case toEngine <- q:
				default: // the engine is busy: this one never gets scheduled
				}
				for range i % 5 {
					typed(q.Detokenized(time.Now(), 1, 0))
				}
				switch i % 4 {
				case 0, 1:
					typed(q.Finish(time.Now(), FinishStop))
				case 2:
					typed(q.Abort(time.Now()))
				} // 3: vanish; the engine's finish, the grace or the TTL ends it
			}
		})
	}
	wg.Go(func() {
		var running []*Request
		st := &Step{}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			*st = Step{Time: time.Now(), QueuedReqs: st.QueuedReqs[:0], PreemptedReqs: st.PreemptedReqs[:0],
				Scheduled: st.Scheduled[:0], Decoded: st.Decoded[:0], Finished: st.Finished[:0]}
		drain:
			for {
				select {
				case q := <-toEngine:
					st.QueuedReqs = append(st.QueuedReqs, q)
					st.Scheduled = append(st.Scheduled, Scheduled{Req: q, ComputedTokens: 16})
					running = append(running, q)
				default:
					break drain
				}
			}
			keep := running[:0]
			for i, q := range running {
				switch {
				case (n+i)%7 == 0:
					st.Finished = append(st.Finished, Finished{Req: q, Reason: FinishLength})
				case (n+i)%11 == 0:
					st.PreemptedReqs = append(st.PreemptedReqs, q)
				case (n+i)%3 == 0:
					// By id: the lookup path, racing finishes by handle
					// (and maybe finding a newer request with the id).
					st.Decoded = append(st.Decoded, Decoded{RequestID: q.ID(), NewTokens: 1})
					keep = append(keep, q)
				default:
					st.Decoded = append(st.Decoded, Decoded{Req: q, NewTokens: 1})
					keep = append(keep, q)
				}
			}
			running = keep
			stepErr(tr.Step(st))
		}
	})
	time.Sleep(300 * time.Millisecond)
	shutdownDone := make(chan error)
	go func() { shutdownDone <- tr.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // record against a closing tracker for a while
	close(stop)
	wg.Wait()
	if err := <-shutdownDone; err != nil {
		t.Fatal(err)
	}
	if n := tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after Shutdown", n)
	}
	if a, f := arrived.Load(), finished.Load(); a != f || a == 0 {
		t.Fatalf("%d arrivals accepted, %d finalized", a, f)
	}
	t.Logf("%d requests, each finalized once", arrived.Load())
}
