package sim

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/otelstats"
)

// run simulates reqs with a fresh tracker and returns the result and every
// request's RequestStats by id.
func run(t *testing.T, cfg Config, reqs []workload.Request, opts ...otelstats.Option) (*Result, map[string]otelstats.RequestStats) {
	t.Helper()
	var mu sync.Mutex
	got := make(map[string]otelstats.RequestStats, len(reqs))
	opts = append(opts,
		otelstats.WithRequestTTL(0),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			mu.Lock()
			got[s.RequestID] = *s
			mu.Unlock()
		}))
	tr, err := otelstats.NewTracker(opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), cfg, reqs, tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res.Rejections != 0 {
		t.Fatalf("the tracker rejected %d updates; first: %v", res.Rejections, res.FirstRejection)
	}
	return res, got
}

// sharedTrace returns the first n requests of the conversation trace, or of
// a synthetic workload when ../shared is not there.
func sharedTrace(t *testing.T, n int) []workload.Request {
	t.Helper()
	if p := workload.FindDefault(); p != "" {
		w, err := workload.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		w.Head(n)
		return w.Requests
	}
	t.Logf("no shared trace; using a synthetic workload")
	return workload.Synthetic(n, 5, 1).Requests
}

func lat(d time.Duration) otelstats.Latency { return otelstats.Latency{Value: max(d, 0), Valid: true} }

// checkTruth compares llmtrace's stats of every request with what the
// simulator knows happened. Virtual times are exact, so equality is exact.
func checkTruth(t *testing.T, truths []Truth, got map[string]otelstats.RequestStats) {
	t.Helper()
	n := 0
	for i := range truths {
		if truths[i].ID != "" {
			n++
		}
	}
	if len(got) != n {
		t.Errorf("llmtrace finished %d requests, the simulator %d", len(got), n)
	}
	bad := 0
	for i := range truths {
		w := &truths[i]
		if w.ID == "" {
			continue // never reached this recorder
		}
		s, ok := got[w.ID]
		if !ok {
			t.Errorf("%s: no RequestStats", w.ID)
			continue
		}
		if errs := diffTruth(w, &s); len(errs) > 0 {
			for _, e := range errs {
				t.Errorf("%s (%s): %s", w.ID, roleName(w.PDRole), e)
			}
			if bad++; bad >= 10 {
				t.Fatalf("stopping after 10 mismatching requests")
			}
		}
	}
}

func roleName(r string) string {
	if r == "" {
		return "unified or router"
	}
	return r
}

// diffTruth lists every value of s that differs from the record w.
func diffTruth(w *Truth, s *otelstats.RequestStats) []string {
	var errs []string
	eq := func(name string, g, want any) {
		if g != want {
			errs = append(errs, fmt.Sprintf("%s = %v, want %v", name, g, want))
		}
	}
	absent := otelstats.Latency{}
	opt := func(ok bool, d time.Duration) otelstats.Latency {
		if !ok {
			return absent
		}
		return lat(d)
	}
	eq("arrival", s.ArrivalTime.UnixNano(), w.Arrival.UnixNano())
	eq("finished", s.FinishedTime.UnixNano(), w.Finish.UnixNano())
	eq("e2e", s.E2ELatency, lat(w.Finish.Sub(w.Arrival)))
	eq("finish_reason", s.FinishReason, w.FinishReason)
	eq("error_type", s.ErrorType, w.ErrorType)
	if w.NoPromptCount {
		eq("num_prompt_tokens", s.NumPromptTokens, otelstats.Count{})
	} else {
		eq("num_prompt_tokens", s.NumPromptTokens, otelstats.Count{N: w.PromptTokens, Valid: true})
	}
	eq("num_output_tokens", s.NumOutputTokens, w.OutputTokens)
	eq("num_preemptions", s.NumPreemptions, w.Preemptions)
	eq("preempted_duration", s.PreemptedDuration, w.Preempted)
	eq("num_recompute_cached_tokens", s.NumRecomputeCachedTokens, w.RecomputeCachedTokens)
	scheduled, first := !w.FirstScheduled.IsZero(), !w.FirstToken.IsZero()
	transfer := time.Duration(0)
	if !w.KVReady.IsZero() {
		transfer = w.KVReady.Sub(w.KVWait)
	}
	eq("queue", s.QueueDuration, opt(scheduled, w.FirstScheduled.Sub(w.FirstQueued)-transfer))
	eq("inference", s.InferenceLatency, opt(scheduled, w.Finish.Sub(w.FirstScheduled)))
	if scheduled {
		eq("num_cached_tokens", s.NumCachedTokens, otelstats.Count{N: w.CachedTokens, Valid: true})
	} else {
		eq("num_cached_tokens", s.NumCachedTokens.Valid, false)
	}
	decode := w.Finish.Sub(w.FirstToken)
	eq("ttft", s.FirstTokenLatency, opt(first, w.FirstToken.Sub(w.Arrival)))
	eq("prefill", s.PrefillLatency, opt(first && scheduled, w.FirstToken.Sub(w.FirstScheduled)))
	eq("decode", s.DecodeLatency, opt(first, decode))
	if w.OutputTokens > 1 {
		eq("tpot", s.TimePerOutputToken, opt(first, decode/time.Duration(w.OutputTokens-1)))
	} else {
		eq("tpot", s.TimePerOutputToken, absent)
	}
	// SPEC §7–9.
	eq("pd_role", s.PDRole, w.PDRole)
	eq("lora_adapter", s.LoRAAdapter, w.Adapter)
	eq("kv_source", s.KVSource, w.KVSource)
	eq("kv_transfer_duration", s.KVTransferDuration, opt(!w.KVReady.IsZero(), transfer))
	eq("num_remote_tokens", s.NumRemoteTokens, w.RemoteTokens)
	eq("kv_transfer_bytes", s.KVTransferBytes, w.KVBytes)
	eq("kv_transfer_failed", s.KVTransferFailed, w.KVFailed)
	routed := !w.PrefillResponded.IsZero()
	eq("pd_prefill_duration", s.PDPrefillDuration, opt(routed, w.PrefillResponded.Sub(w.PrefillSent)))
	eq("pd_decode_ttft", s.PDDecodeTTFT, opt(routed && first, w.FirstToken.Sub(w.DecodeSent)))
	eq("num_draft_tokens", s.NumDraftTokens, w.DraftTokens)
	eq("num_accepted_tokens", s.NumAcceptedTokens, w.AcceptedTokens)
	eq("num_spec_steps", s.NumSpecSteps, w.SpecSteps)
	rate, length := 0.0, 0.0
	if w.SpecSteps > 0 {
		rate = float64(w.AcceptedTokens) / float64(w.DraftTokens)
		length = 1 + float64(w.AcceptedTokens)/float64(w.SpecSteps)
	}
	eq("spec_acceptance_rate", s.SpecAcceptanceRate, rate)
	eq("spec_mean_acceptance_length", s.SpecMeanAcceptanceLength, length)
	eq("encode_duration", s.EncodeDuration, opt(w.EncoderRuns > 0, w.EncodeTime))
	eq("num_encoder_runs", s.NumEncoderRuns, w.EncoderRuns)
	if w.FinishReason != ReasonAbort {
		// An aborted request's engine spans run past the client's end
		// and are clamped into the root, as SPEC §5 says.
		eq("clamped_spans", s.ClampedSpans, 0)
	}
	return errs
}

// TestGroundTruth replays 2,000 requests of the conversation trace with the
// default engine and checks every request's derived values against the
// simulator's own record.
func TestGroundTruth(t *testing.T) {
	cfg := DefaultConfig()
	res, got := run(t, cfg, sharedTrace(t, 2000))
	checkTruth(t, res.Requests, got)
	var cached, prompt, preempted int
	for _, w := range res.Requests {
		cached += w.CachedTokens
		prompt += w.PromptTokens
		if w.Preemptions > 0 {
			preempted++
		}
	}
	t.Logf("%d steps, %d preemptions in %d requests, prefix-cache hit rate %.1f%%, max running %d, max waiting %d, virtual %v",
		res.Steps, res.Preemptions, preempted, 100*float64(cached)/float64(prompt), res.MaxRunning, res.MaxWaiting, res.End.Sub(res.Start))
	if res.Preemptions == 0 {
		t.Errorf("the default configuration preempted nothing; the demo should show preemptions")
	}
	if cached == 0 {
		t.Errorf("no prefix-cache hits")
	}
}

// TestGroundTruthUnderPressure runs a tiny KV cache, a small token budget
// and chunked prefills so preemptions, recomputes with cache hits and
// multi-chunk prefills are frequent, and checks every request again.
func TestGroundTruthUnderPressure(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 300
	cfg.MaxModelLen = 4096
	cfg.MaxNumBatchedTokens = 512
	cfg.MaxNumSeqs = 32
	w := workload.Synthetic(800, 8, 3)
	for i := range w.Requests {
		// Some prompts at and beyond the context window.
		if i%97 == 0 {
			w.Requests[i].PromptTokens = 4096 + i%3
		}
		if i%89 == 0 {
			w.Requests[i].PromptTokens, w.Requests[i].OutputTokens = 4000, 500
		}
	}
	res, got := run(t, cfg, w.Requests)
	checkTruth(t, res.Requests, got)
	var multi, recompHits, rejected, length int
	for _, r := range res.Requests {
		if r.Preemptions > 1 {
			multi++
		}
		recompHits += r.RecomputeCachedTokens
		switch r.FinishReason {
		case otelstats.FinishError:
			rejected++
		case ReasonLength:
			length++
		}
	}
	t.Logf("%d preemptions, %d requests preempted more than once, %d recompute cache hits, %d rejected, %d cut at the context window",
		res.Preemptions, multi, recompHits, rejected, length)
	if multi == 0 || recompHits == 0 || rejected == 0 || length == 0 {
		t.Errorf("the pressure run did not exercise repeated preemption, recompute hits, rejection and length cuts")
	}
}

// TestGroundTruthWithAborts has a third of the clients disconnect halfway
// through their responses, on a KV cache small enough that some are
// preempted when they abort, and checks every request against the
// simulator's record: aborted requests end at the frontend's abort with
// finish reason and error type "abort", and the engine frees them.
func TestGroundTruthWithAborts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 300
	cfg.MaxModelLen = 4096
	cfg.MaxNumSeqs = 32
	cfg.AbortRate = 0.3
	res, got := run(t, cfg, workload.Synthetic(600, 8, 5).Requests)
	checkTruth(t, res.Requests, got)
	var aborted, preempted int
	for _, r := range res.Requests {
		if r.FinishReason != ReasonAbort {
			continue
		}
		aborted++
		if r.Preemptions > 0 {
			preempted++
		}
		if r.EngineFinish.IsZero() {
			t.Errorf("%s: the engine never finished the aborted request", r.ID)
		}
	}
	t.Logf("%d of %d requests aborted, %d of them after a preemption; %d preemptions in all",
		aborted, len(res.Requests), preempted, res.Preemptions)
	if aborted < len(res.Requests)/5 || aborted > len(res.Requests)*2/5 {
		t.Errorf("%d of %d requests aborted at rate %v", aborted, len(res.Requests), cfg.AbortRate)
	}
	if preempted == 0 {
		t.Errorf("no aborted request had been preempted; the run does not exercise aborts of preempted requests")
	}
}

// TestAbortWhilePreempted aborts a request while it waits after a
// preemption: two requests of 40 prompt tokens share a 7-block cache, the
// second is preempted when both need a fourth block (after 9 output
// tokens), and its client disconnects when the 9th token, produced before
// the preemption, is delivered. Its preempted time runs until the abort,
// where its request and its llm.queue span end; the engine frees it later.
func TestAbortWhilePreempted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks, cfg.MaxModelLen, cfg.Prefixes, cfg.AbortRate = 7, 112, nil, 1
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	reqs := []workload.Request{
		{Arrival: t0, PromptTokens: 40, OutputTokens: 60},
		{Arrival: t0.Add(time.Millisecond), PromptTokens: 40, OutputTokens: 18}, // aborts at 18/2 = 9
	}
	res, got := run(t, cfg, reqs)
	checkTruth(t, res.Requests, got)
	b := res.Requests[1]
	if b.FinishReason != ReasonAbort || b.Preemptions != 1 || b.OutputTokens != 9 || b.Preempted <= 0 {
		t.Errorf("second request: %s after %d tokens, %d preemptions, %v preempted; want an abort after 9 tokens while preempted",
			b.FinishReason, b.OutputTokens, b.Preemptions, b.Preempted)
	}
	if b.EngineFinish.Before(b.Finish) {
		t.Errorf("the engine freed the request at %v, before the frontend's abort at %v", b.EngineFinish, b.Finish)
	}
}

func TestAbortRateValidation(t *testing.T) {
	for _, rate := range []float64{-0.1, 1.5, math.NaN()} {
		cfg := DefaultConfig()
		cfg.AbortRate = rate
		if err := cfg.Validate(); err == nil {
			t.Errorf("abort rate %v: no error", rate)
		}
	}
	for _, rate := range []float64{0, 0.5, 1} {
		cfg := DefaultConfig()
		cfg.AbortRate = rate
		if err := cfg.Validate(); err != nil {
			t.Errorf("abort rate %v: %v", rate, err)
		}
	}
}
