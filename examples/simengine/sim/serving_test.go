package sim

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// pdRun is a P/D run: the three trackers' stats by request id, and every
// span the shared TracerProvider ended.
type pdRun struct {
	res                     *Result
	router, prefill, decode map[string]otelstats.RequestStats
	spans                   []sdktrace.ReadOnlySpan
}

// runPD simulates reqs through a router, a prefill and a decode instance,
// three trackers on one TracerProvider.
func runPD(t *testing.T, cfg Config, reqs []workload.Request) *pdRun {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	out := &pdRun{}
	var mu sync.Mutex
	tracker := func(dst *map[string]otelstats.RequestStats) *otelstats.Tracker {
		*dst = map[string]otelstats.RequestStats{}
		m := *dst
		tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp), otelstats.WithRequestTTL(0),
			otelstats.WithTrustParentSampling(true),
			otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
				mu.Lock()
				m[s.RequestID] = *s
				mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	trs := PDTrackers{Router: tracker(&out.router), Prefill: tracker(&out.prefill), Decode: tracker(&out.decode)}
	res, err := RunPD(context.Background(), cfg, reqs, trs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []*otelstats.Tracker{trs.Router, trs.Prefill, trs.Decode} {
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if res.Rejections != 0 {
		t.Fatalf("the trackers rejected %d updates; first: %v", res.Rejections, res.FirstRejection)
	}
	out.res, out.spans = res, rec.Ended()
	return out
}

// checkPD checks the three records of every request against the trackers,
// and that each client request is one trace: P's and D's roots children of
// the router's root, D's KV transfer between its two queue waits.
func checkPD(t *testing.T, run *pdRun) {
	t.Helper()
	res := run.res
	checkTruth(t, res.Requests, run.router)
	checkTruth(t, res.Prefill, run.prefill)
	checkTruth(t, res.Decode, run.decode)

	bySpan := map[string]sdktrace.ReadOnlySpan{}
	byParent := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range run.spans {
		bySpan[s.SpanContext().SpanID().String()] = s
		byParent[s.Parent().SpanID().String()] = append(byParent[s.Parent().SpanID().String()], s)
	}
	traces := map[string]bool{}
	for id, r := range run.router {
		if traces[r.TraceID] {
			t.Fatalf("%s: trace %s shared with another client request", id, r.TraceID)
		}
		traces[r.TraceID] = true
		p, okP := run.prefill[id]
		d, okD := run.decode[id]
		if !okP {
			t.Fatalf("%s: no prefill-side request", id)
		}
		for _, x := range []struct {
			role string
			s    otelstats.RequestStats
			ok   bool
		}{{"prefill", p, true}, {"decode", d, okD}} {
			if !x.ok {
				continue
			}
			if x.s.TraceID != r.TraceID {
				t.Fatalf("%s: %s trace %s, router trace %s", id, x.role, x.s.TraceID, r.TraceID)
			}
			root := bySpan[x.s.SpanID]
			if root == nil || root.Parent().SpanID().String() != r.SpanID {
				t.Fatalf("%s: %s root %v is not a child of the router's root %s", id, x.role, root, r.SpanID)
			}
		}
		if okD && d.KVSource != "" {
			checkTransferBetweenWaits(t, id, byParent[d.SpanID])
		}
	}
}

func checkTransferBetweenWaits(t *testing.T, id string, kids []sdktrace.ReadOnlySpan) {
	t.Helper()
	var newQ, readyQ, kv sdktrace.ReadOnlySpan
	for _, k := range kids {
		switch k.Name() {
		case attributes.SpanKVTransfer:
			kv = k
		case attributes.SpanQueue:
			for _, a := range k.Attributes() {
				if a.Key == attributes.QueueReason {
					switch a.Value.AsString() {
					case attributes.QueueReasonNew:
						newQ = k
					case attributes.QueueReasonKVReady:
						readyQ = k
					}
				}
			}
		}
	}
	if kv == nil || newQ == nil || readyQ == nil {
		t.Fatalf("%s: decode spans lack the transfer or a wait: kv %v new %v kv_ready %v", id, kv != nil, newQ != nil, readyQ != nil)
	}
	if !newQ.EndTime().Equal(kv.StartTime()) || !kv.EndTime().Equal(readyQ.StartTime()) {
		t.Fatalf("%s: queue (new) ends %v, transfer %v–%v, queue (kv_ready) starts %v", id,
			newQ.EndTime(), kv.StartTime(), kv.EndTime(), readyQ.StartTime())
	}
}

// TestGroundTruthPD routes 1,000 requests of the conversation trace through
// a router, a prefill and a decode instance, with failed transfers and
// client disconnects, and checks all three records of every request.
func TestGroundTruthPD(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 1024
	cfg.PD.FailureRate = 0.1
	cfg.AbortRate = 0.1
	run := runPD(t, cfg, sharedTrace(t, 1000))
	checkPD(t, run)
	var transfers, failed, aborted, prePreempt, dPreempt int
	var moved int64
	for _, d := range run.res.Decode {
		if d.KVSource != "" {
			transfers++
			moved += d.KVBytes
		}
		if d.KVFailed {
			failed++
		}
		if d.FinishReason == ReasonAbort {
			aborted++
		}
		if d.Preemptions > 0 {
			dPreempt++
		}
	}
	for _, p := range run.res.Prefill {
		if p.Preemptions > 0 {
			prePreempt++
		}
	}
	t.Logf("%d transfers (%d failed, %.1f GB moved), %d aborted, preempted on P %d, on D %d; P %d steps, D %d steps",
		transfers, failed, float64(moved)/1e9, aborted, prePreempt, dPreempt, run.res.Instances[0].Steps, run.res.Instances[1].Steps)
	if transfers < 900 || failed == 0 || aborted == 0 {
		t.Errorf("the run did not exercise transfers, failures and aborts")
	}
}

// TestGroundTruthSpeculative decodes 800 requests with a draft of 4 and
// checks every request, and that the acceptance model holds: at each
// position the share of judged drafts accepted is near its probability.
func TestGroundTruthSpeculative(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Spec = Spec{K: 4, Accept: []float64{0.8, 0.7, 0.6, 0.5}}
	cfg.AbortRate = 0.1
	res, got := run(t, cfg, sharedTrace(t, 800))
	checkTruth(t, res.Requests, got)
	sp := res.Spec
	var draft, accepted int64
	for _, w := range res.Requests {
		draft += int64(w.DraftTokens)
		accepted += int64(w.AcceptedTokens)
	}
	var acc int64
	for i := range sp.Accepted {
		acc += sp.Accepted[i]
	}
	if draft != sp.DraftTokens || accepted != acc || sp.Tokens != acc+sp.Steps {
		t.Errorf("per-request totals draft %d accepted %d; per position draft %d accepted %d, tokens %d in %d steps",
			draft, accepted, sp.DraftTokens, acc, sp.Tokens, sp.Steps)
	}
	for i, p := range cfg.Spec.Accept {
		rate := float64(sp.Accepted[i]) / float64(sp.Reached[i])
		t.Logf("position %d: %d drafted, %d judged, %d accepted (%.3f, model %.2f)", i, sp.Drafted[i], sp.Reached[i], sp.Accepted[i], rate, p)
		if math.Abs(rate-p) > 0.02 {
			t.Errorf("position %d accepted %.3f of judged drafts, the model says %.2f", i, rate, p)
		}
	}
	t.Logf("acceptance rate %.3f, mean acceptance length %.3f", float64(accepted)/float64(draft), 1+float64(accepted)/float64(sp.Steps))
}

// TestGroundTruthLoRA serves three adapters and the base model with room
// for one adapter per batch, so requests wait for their adapter's turn.
func TestGroundTruthLoRA(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLoRAs = 1
	w := &workload.Workload{Requests: sharedTrace(t, 600)}
	w.AssignAdapters([]workload.Share{{Adapter: "sql-lora", Fraction: 0.3}, {Adapter: "chat-lora", Fraction: 0.2}, {Adapter: "code-lora", Fraction: 0.1}}, 7)
	res, got := run(t, cfg, w.Requests, otelstats.WithAdapters("sql-lora", "chat-lora", "code-lora"))
	checkTruth(t, res.Requests, got)
	n := map[string]int{}
	for _, r := range res.Requests {
		n[r.Adapter]++
	}
	t.Logf("requests by adapter %v; most adapters in a batch %d", n, res.Instances[0].MaxAdapters)
	if len(n) != 4 || res.Instances[0].MaxAdapters != 1 {
		t.Errorf("adapters %v, at most %d in a batch: want four groups and the limit of 1 reached", n, res.Instances[0].MaxAdapters)
	}
}

// TestGroundTruthMultimodal gives a third of the requests images, on an
// encoder budget and token budget small enough that some images are
// encoded during prefill, and a KV cache small enough that preempted
// requests re-encode — some from the encoder cache.
func TestGroundTruthMultimodal(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 400
	cfg.MaxModelLen = 6000
	cfg.MaxNumBatchedTokens = 2048
	cfg.Multimodal.EncoderBudget = 1152
	w := &workload.Workload{Requests: sharedTrace(t, 600)}
	if err := w.AssignImages(0.35, 3, 5); err != nil {
		t.Fatal(err)
	}
	res, got := run(t, cfg, w.Requests)
	checkTruth(t, res.Requests, got)
	var before, during, hits, images int
	for _, r := range res.Requests {
		before += r.EncodeBefore
		during += r.EncodeDuring
		hits += r.EncoderHits
		images += r.Images
	}
	t.Logf("%d images; encoder runs %d before prefill, %d during, %d encoder-cache hits; %d preemptions", images, before, during, hits, res.Preemptions)
	if before == 0 || during == 0 || hits == 0 {
		t.Errorf("the run did not exercise encoder runs before and during prefill and cache hits")
	}
}

// TestGroundTruthAllFeatures runs everything at once on small engines: P/D
// with failed transfers, speculative decoding on the decode instance,
// adapters, images, aborts, preemptions and chunked prefills.
func TestGroundTruthAllFeatures(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NumBlocks = 400
	cfg.MaxModelLen = 6000
	cfg.MaxNumBatchedTokens = 1024
	cfg.MaxNumSeqs = 48
	cfg.MaxLoRAs = 2
	cfg.AbortRate = 0.2
	cfg.PD.FailureRate = 0.2
	cfg.Spec = Spec{K: 3, Accept: []float64{0.7}}
	w := workload.Synthetic(500, 6, 11)
	w.AssignAdapters([]workload.Share{{Adapter: "a", Fraction: 0.3}, {Adapter: "b", Fraction: 0.3}, {Adapter: "c", Fraction: 0.2}}, 3)
	if err := w.AssignImages(0.3, 2, 3); err != nil {
		t.Fatal(err)
	}
	run := runPD(t, cfg, w.Requests)
	checkPD(t, run)
	var failed, spec, enc, rejected, dPreempt int
	for _, d := range run.res.Decode {
		if d.KVFailed {
			failed++
		}
		if d.SpecSteps > 0 {
			spec++
		}
		enc += d.EncoderRuns
		if d.Preemptions > 0 {
			dPreempt++
		}
	}
	for _, r := range run.res.Requests {
		if r.ErrorType == ErrContextLenExceeded {
			rejected++
		}
	}
	t.Logf("%d failed transfers, %d requests speculated, %d encoder runs on D (recomputes), %d preempted on D, %d rejected by P",
		failed, spec, enc, dPreempt, rejected)
	if failed == 0 || spec == 0 || enc == 0 || dPreempt == 0 || rejected == 0 {
		t.Errorf("the run did not exercise every feature")
	}
}

// TestLoadSeries checks the bounded series: points merge pairwise, keeping
// maxima and summing preemptions.
func TestLoadSeries(t *testing.T) {
	var l loadSeries
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range 4 * loadPoints {
		p := l.slot(start, start+int64(i)*loadWidth0)
		p.Running = max(p.Running, i)
		p.Preemptions++
	}
	pts := l.points()
	if len(pts) > loadPoints || l.width != 4*loadWidth0 {
		t.Fatalf("%d points of %v", len(pts), time.Duration(l.width))
	}
	total := 0
	for _, p := range pts {
		total += p.Preemptions
	}
	if total != 4*loadPoints || pts[len(pts)-1].Running != 4*loadPoints-1 || !pts[1].At.Equal(time.Unix(0, start+4*loadWidth0).UTC()) {
		t.Errorf("preemptions %d, last running %d, second point at %v", total, pts[len(pts)-1].Running, pts[1].At)
	}
}
