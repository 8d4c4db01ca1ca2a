package otelstats

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §7–9's update constructors.
func kvWait(id string, ms float64, source string, remote int) Update {
	return Update{RequestID: id, Kind: KindRemoteKVWait, Time: at(ms), KVSource: source, NumRemoteTokens: remote}
}
func kvReady(id string, ms float64, remote int, bytes int64, status string) Update {
	return Update{RequestID: id, Kind: KindRemoteKVReady, Time: at(ms), NumRemoteTokens: remote, KVBytes: bytes, KVStatus: status}
}
func encoding(id string, ms float64, items, tokens int) Update {
	return Update{RequestID: id, Kind: KindEncoding, Time: at(ms), NumItems: items, NumEncoderTokens: tokens}
}
func encoded(id string, ms float64, hit bool) Update {
	return Update{RequestID: id, Kind: KindEncoded, Time: at(ms), EncoderCacheHit: hit}
}
func specDecoding(id string, ms float64, n, draft, accepted int) Update {
	return Update{RequestID: id, Kind: KindDecoding, Time: at(ms), NumNewTokens: n, NumDraftTokens: draft, NumAcceptedTokens: accepted}
}
func arrivedPD(id string, ms float64, role, adapter string) Update {
	u := arrived(id, ms, "m", "chat")
	u.PDRole, u.LoRAAdapter = role, adapter
	return u
}

// decodeInstance is a request on a P/D decode instance: its KV cache comes
// from "prefill-0" between 4 and 14 ms.
func decodeInstance(id string, status string) []Update {
	remote := 96
	if status == KVStatusFailed {
		remote = 0
	}
	return []Update{
		arrivedPD(id, 0, PDRoleDecode, ""),
		inputProcessed(id, 1, 100),
		queued(id, 2),
		kvWait(id, 4, "prefill-0", 96),
		kvReady(id, 14, remote, 4<<20, status),
		prefilling(id, 16, 100, 0),
		decoding(id, 20, 1),
		detok(id, 21, 1, 0),
		decoding(id, 30, 1),
		detok(id, 31, 1, 0),
		enFinished(id, 31, "stop"),
		feFinished(id, 32, "stop"),
	}
}

// SPEC §7: a decode instance's request — the wait for the KV cache, its
// transfer, the wait after it — with the values, spans and metrics.
func TestPDDecodeInstance(t *testing.T) {
	h := newHarness(t)
	h.feed(decodeInstance("d", ""))
	s := h.statsOf("d")
	checkStats(t, s, wantStats{reason: "stop", finished: 32, e2e: 32, queue: 4, ttft: 21, prefill: 5, decode: 11,
		inference: 16, tpot: 11, itl: []float64{10}, prompt: 100, cached: 0, out: 2})
	if s.PDRole != PDRoleDecode || s.KVSource != "prefill-0" || s.NumRemoteTokens != 96 || s.KVTransferBytes != 4<<20 || s.KVTransferFailed {
		t.Errorf("P/D stats %+v", s)
	}
	wantLatency(t, "kv_transfer_duration", s.KVTransferDuration, 10)
	h.checkTree(s, wantRoot{name: "chat m", start: 0, end: 32, attrs: []attribute.KeyValue{
		attributes.PDRole.String(PDRoleDecode), attributes.LatencyKVTransfer.Float64(0.010), attributes.LatencyTimeInQueue.Float64(0.004),
	}}, []wantSpan{
		spInput(0, 1, 100),
		spHandoff(1, 2),
		spQueue(2, 4, attributes.QueueReasonNew),
		{name: attributes.SpanKVTransfer, start: 4, end: 14, attrs: []attribute.KeyValue{
			attributes.KVTransferTokens.Int(96), attributes.KVTransferBytes.Int64(4 << 20), attributes.KVTransferSource.String("prefill-0")}},
		spQueue(14, 16, attributes.QueueReasonKVReady),
		{name: attributes.SpanPrefill, start: 16, end: 21, attrs: []attribute.KeyValue{
			attributes.PrefillComputedTokens.Int(100), attributes.PrefillRemoteTokens.Int(96), attributes.PrefillRecompute.Bool(false)}},
		spDecode(21, 31, 2, 0),
		spDetok(21, 31, 0, 2),
	})
	role := attributes.PDRole.String(PDRoleDecode)
	h.wantHist(attributes.MetricKVTransferDuration, 1, 10, role)
	h.wantCounter(attributes.MetricKVTransferTokens, 96, role)
	h.wantCounter(attributes.MetricKVTransferBytes, 4<<20, role)
	h.wantCounter(attributes.MetricKVTransferFailures, 0)
	// llm.pd.role is on every instance histogram and counter.
	h.wantHist(attributes.MetricTimeToFirstToken, 1, 21, role)
	h.wantHist(attributes.MetricQueueDuration, 1, 4, role)
	h.wantCounter(attributes.MetricRequests, 1, role)
	h.wantCounter(attributes.MetricPrefixCacheHits, 0, role)
}

// A failed transfer: the span says so, the prompt is recomputed, the
// request goes on, the failure is counted.
func TestPDTransferFailed(t *testing.T) {
	h := newHarness(t)
	h.feed(decodeInstance("f", KVStatusFailed))
	s := h.statsOf("f")
	if !s.KVTransferFailed || s.NumRemoteTokens != 0 || s.FinishReason != "stop" || s.NumOutputTokens != 2 {
		t.Fatalf("stats %+v", s)
	}
	_, kids := h.treeOf(s)
	var kv, prefill bool
	for _, k := range kids {
		switch k.Name() {
		case attributes.SpanKVTransfer:
			kv = true
			if k.Status().Code != codes.Error {
				t.Errorf("failed transfer span status %v", k.Status())
			}
			checkAttrs(t, "kv_transfer", k.Attributes(), []attribute.KeyValue{attributes.ErrorType.String(attributes.ErrorKVTransferFailed)})
		case attributes.SpanPrefill:
			prefill = true
			if _, ok := attrOf(k.Attributes(), attributes.PrefillRemoteTokens); ok {
				t.Errorf("recomputed prefill has remote tokens")
			}
		}
	}
	if !kv || !prefill {
		t.Fatalf("spans %v", kids)
	}
	h.wantCounter(attributes.MetricKVTransferFailures, 1, attributes.PDRole.String(PDRoleDecode))
}

// num_remote_tokens are the prompt tokens whose KV arrived (SPEC §7): not
// the WAIT's expectation when the request ends during the transfer, not a
// failed READY's count (those tokens are recomputed).
func TestPDRemoteTokensOnlyArrived(t *testing.T) {
	for _, c := range []struct {
		name string
		tail []Update
	}{
		{"aborted during the transfer", []Update{feFinished("k", 9, "abort")}},
		{"failed, with a count", []Update{kvReady("k", 10, 96, 0, KVStatusFailed), prefilling("k", 12, 100, 0),
			decoding("k", 14, 1), enFinished("k", 15, "stop"), feFinished("k", 16, "stop")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(append([]Update{arrivedPD("k", 0, PDRoleDecode, ""), inputProcessed("k", 1, 100), queued("k", 2),
				kvWait("k", 4, "prefill-0", 96)}, c.tail...))
			h.tr.Flush()
			s := h.statsOf("k")
			if s.NumRemoteTokens != 0 {
				t.Errorf("num_remote_tokens %d, want 0", s.NumRemoteTokens)
			}
			h.wantCounter(attributes.MetricKVTransferTokens, 0)
		})
	}
}

// A prefill instance's request ends after its first token, with the
// finish reason the engine reports.
func TestPDPrefillInstance(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrivedPD("p", 0, PDRolePrefill, ""), inputProcessed("p", 1, 100), queued("p", 2),
		prefilling("p", 3, 100, 40), decoding("p", 9, 1), enFinished("p", 9, FinishRemoteDecode)})
	h.tr.Flush()
	s := h.statsOf("p")
	wantLatency(t, "ttft", s.FirstTokenLatency, 9)
	if s.PDRole != PDRolePrefill || s.FinishReason != FinishRemoteDecode || s.ErrorType != "" {
		t.Fatalf("stats %+v", s)
	}
	root, _ := h.treeOf(s)
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{attributes.PDRole.String(PDRolePrefill),
		attributes.PrefixCacheHitRatio.Float64(0.4)})
}

// Every SPEC §7–9 rule is a typed rejection that leaves the request as it
// was and is counted under its reason.
func TestServingRejections(t *testing.T) {
	cases := []struct {
		name   string
		before []Update
		bad    Update
		reason Reason
		prefix []Update // instead of ARRIVED, INPUT_PROCESSED, QUEUED
	}{
		{"a second transfer", []Update{kvWait("r", 4, "p", 0), kvReady("r", 5, 10, 0, "")},
			kvWait("r", 6, "p", 0), ReasonDuplicateTransfer, nil},
		{"a second wait while waiting", []Update{kvWait("r", 4, "p", 0)}, kvWait("r", 6, "p", 0), ReasonDuplicateTransfer, nil},
		{"remote > prompt", []Update{kvWait("r", 4, "p", 0)}, kvReady("r", 5, 101, 0, ""), ReasonRemoteExceedsPrompt, nil},
		{"remote > prompt on the wait", nil, kvWait("r", 4, "p", 101), ReasonRemoteExceedsPrompt, nil},
		{"remote + cached > computed", []Update{kvWait("r", 4, "p", 0), kvReady("r", 5, 90, 0, "")},
			prefilling("r", 6, 95, 10), ReasonRemoteExceedsComputed, nil},
		{"kv_status unknown", []Update{kvWait("r", 4, "p", 0)}, kvReady("r", 5, 10, 0, "maybe"), ReasonUnknownValue, nil},
		{"REMOTE_KV_READY without the wait", nil, kvReady("r", 5, 10, 0, ""), ReasonBadTransition, nil},
		{"REMOTE_KV_WAIT before QUEUED", nil, kvWait("r", 3, "p", 0), ReasonBadTransition,
			[]Update{arrivedPD("r", 0, PDRoleDecode, ""), inputProcessed("r", 1, 100)}},
		{"REMOTE_KV_WAIT without a source", nil, kvWait("r", 4, "", 0), ReasonMissingPayload, nil},
		{"negative kv_bytes", []Update{kvWait("r", 4, "p", 0)}, kvReady("r", 5, 10, -1, ""), ReasonNegativeCount, nil},
		{"accepted > draft", []Update{prefilling("r", 4, 100, 0), decoding("r", 5, 1)}, specDecoding("r", 6, 3, 2, 3), ReasonAcceptedExceedsDraft, nil},
		{"accepted > new tokens", []Update{prefilling("r", 4, 100, 0), decoding("r", 5, 1)}, specDecoding("r", 6, 1, 4, 2), ReasonAcceptedExceedsNewTokens, nil},
		{"accepted without draft", []Update{prefilling("r", 4, 100, 0)}, specDecoding("r", 6, 3, 0, 2), ReasonAcceptedExceedsDraft, nil},
		{"negative draft", []Update{prefilling("r", 4, 100, 0)}, specDecoding("r", 6, 3, -1, 0), ReasonNegativeCount, nil},
		{"ENCODED without ENCODING", nil, encoded("r", 4, false), ReasonBadTransition, nil},
		{"ENCODING twice", []Update{encoding("r", 4, 1, 10)}, encoding("r", 5, 1, 10), ReasonBadTransition, nil},
		{"ENCODING after decoding began", []Update{prefilling("r", 4, 100, 0), decoding("r", 5, 1)}, encoding("r", 6, 1, 10), ReasonBadTransition, nil},
		{"ENCODING without items", nil, encoding("r", 4, 0, 10), ReasonMissingPayload, nil},
		{"ENCODING backwards in time", []Update{prefilling("r", 4, 100, 0)}, encoding("r", 3, 1, 10), ReasonTimeBackwards, nil},
		{"unknown pd_role", nil, Update{RequestID: "x", Kind: KindArrived, Time: at(0), Model: "m", PDRole: "both"}, ReasonUnknownValue, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			prefix := tc.prefix
			if prefix == nil {
				prefix = []Update{arrivedPD("r", 0, PDRoleDecode, ""), inputProcessed("r", 1, 100), queued("r", 2)}
			}
			h.feed(append(prefix, tc.before...))
			err := h.tr.Record(tc.bad)
			var re *RejectError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, tc.reason) {
				t.Fatalf("err = %v, want a RejectError with reason %s", err, tc.reason)
			}
			if h.rejects(tc.reason) != 1 {
				t.Errorf("not counted under %s", tc.reason)
			}
			// The request goes on untouched by the bad update.
			h.must(enFinished("r", 50, "stop"))
			h.must(feFinished("r", 51, "stop"))
			if s := h.statsOf("r"); s.FinishReason != "stop" || s.E2ELatency.Value != 51*time.Millisecond {
				t.Errorf("request after the rejection: %+v", s)
			}
		})
	}
}

// specRequest is an engine-only request with three speculative steps
// after its first token: 12 drafted, 6 accepted (2, 0, 4).
func specRequest(id string) []Update {
	return []Update{arrived(id, 0, "m", "chat"), queued(id, 1), prefilling(id, 2, 10, 0),
		decoding(id, 10, 1), specDecoding(id, 20, 3, 4, 2), specDecoding(id, 30, 1, 4, 0),
		specDecoding(id, 40, 5, 4, 4), enFinished(id, 40, "stop")}
}

// SPEC §8: totals, rate and mean acceptance length on RequestStats and the
// root, the segment's own counts on llm.decode, the metrics; TPOT and the
// token count are those of delivered tokens.
func TestSpeculativeDecoding(t *testing.T) {
	h := newHarness(t)
	h.feed(specRequest("s"))
	s := h.statsOf("s")
	if s.NumDraftTokens != 12 || s.NumAcceptedTokens != 6 || s.NumSpecSteps != 3 || s.SpecAcceptanceRate != 0.5 ||
		s.SpecMeanAcceptanceLength != 3 || s.NumOutputTokens != 10 {
		t.Fatalf("spec stats: draft %d accepted %d steps %d rate %v length %v out %d", s.NumDraftTokens,
			s.NumAcceptedTokens, s.NumSpecSteps, s.SpecAcceptanceRate, s.SpecMeanAcceptanceLength, s.NumOutputTokens)
	}
	wantLatency(t, "tpot", s.TimePerOutputToken, 3.333333) // 30 ms / 9, to the nanosecond
	root, kids := h.treeOf(s)
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{
		attributes.SpecDraftTokens.Int(12), attributes.SpecAcceptedTokens.Int(6), attributes.SpecSteps.Int(3),
		attributes.SpecAcceptanceRate.Float64(0.5), attributes.SpecMeanAcceptanceLength.Float64(3)})
	for _, k := range kids {
		if k.Name() == attributes.SpanDecode {
			checkAttrs(t, "decode", k.Attributes(), []attribute.KeyValue{attributes.SpecDraftTokens.Int(12),
				attributes.SpecAcceptedTokens.Int(6), attributes.SpecSteps.Int(3), attributes.DecodeOutputTokens.Int(10)})
		}
	}
	h.wantCounter(attributes.MetricSpecDraftTokens, 12)
	h.wantCounter(attributes.MetricSpecAcceptedTokens, 6)
	h.wantCounter(attributes.MetricSpecSteps, 3)
	for pos, want := range []int64{2, 2, 1, 1, 0} {
		h.wantCounter(attributes.MetricSpecAcceptedPerPosition, want, attributes.SpecPosition.Int(pos))
	}
	n, sum := h.hist(attributes.MetricSpecAcceptanceRate)
	if n != 1 || sum != 0.5 {
		t.Errorf("acceptance rate histogram: %d values, sum %v", n, sum)
	}
	// A request without speculation has none of it.
	h.feed([]Update{arrived("plain", 50, "m", "chat"), queued("plain", 51), prefilling("plain", 52, 4, 0),
		decoding("plain", 60, 1), enFinished("plain", 61, "stop")})
	p := h.statsOf("plain")
	if p.NumSpecSteps != 0 || bytes.Contains(p.AppendJSON(nil), []byte("spec_")) {
		t.Errorf("a request without speculation reports it: %s", p.AppendJSON(nil))
	}
}

// The Step fast path records speculative steps exactly as the update path,
// positions past 15 summed in 15.
func TestSpeculativeStepByHandle(t *testing.T) {
	h := newHarness(t)
	q, err := h.tr.Arrive(context.Background(), "h", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []Step{
		{Time: at(1), QueuedReqs: []*Request{q}},
		{Time: at(2), Scheduled: []Scheduled{{Req: q, ComputedTokens: 10}}},
		{Time: at(10), Decoded: []Decoded{{Req: q, NewTokens: 1}}},
		{Time: at(20), SpecDecoded: []SpecDecoded{{Req: q, NewTokens: 18, DraftTokens: 20, AcceptedTokens: 17}}},
		{Time: at(30), SpecDecoded: []SpecDecoded{{Req: q, NewTokens: 1, DraftTokens: 2, AcceptedTokens: 2}}}, // accepted > new tokens
		{Time: at(31), SpecDecoded: []SpecDecoded{{Req: q, NewTokens: 3, DraftTokens: 2, AcceptedTokens: 3}}}, // accepted > draft
		{Time: at(32), SpecDecoded: []SpecDecoded{{Req: q, NewTokens: 1}}},                                    // the draft proposed nothing: a plain decode
		{Time: at(40), Finished: []Finished{{Req: q, Reason: "stop"}}},
	}
	var rejected []error
	for i := range steps {
		if err := h.tr.Step(&steps[i]); err != nil {
			rejected = append(rejected, err)
		}
	}
	if len(rejected) != 2 || !errors.Is(rejected[0], ReasonAcceptedExceedsNewTokens) || !errors.Is(rejected[1], ReasonAcceptedExceedsDraft) {
		t.Fatalf("rejections %v, want accepted_exceeds_new_tokens then accepted_exceeds_draft", rejected)
	}
	s := h.statsOf("h")
	if s.NumDraftTokens != 20 || s.NumAcceptedTokens != 17 || s.NumSpecSteps != 1 || s.NumOutputTokens != 20 {
		t.Fatalf("spec stats %+v", s)
	}
	h.wantCounter(attributes.MetricSpecAcceptedPerPosition, 1, attributes.SpecPosition.Int(14))
	h.wantCounter(attributes.MetricSpecAcceptedPerPosition, 2, attributes.SpecPosition.Int(attributes.SpecPositions-1))
}

// A step may mix plain and speculative decodes, by handle and by id; both
// lists count in the step's batch, and the id path applies the same rules.
func TestSpeculativeStepMixed(t *testing.T) {
	h := newHarness(t, WithDetail(DetailSteps))
	q, err := h.tr.Arrive(context.Background(), "a", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	h.feed([]Update{arrived("b", 0, "m", "")})
	steps := []Step{
		{Time: at(1), QueuedReqs: []*Request{q}, Queued: []string{"b"}},
		{Time: at(2), Scheduled: []Scheduled{{Req: q, ComputedTokens: 10}, {RequestID: "b", ComputedTokens: 10}}},
		{Time: at(10), Decoded: []Decoded{{Req: q}, {RequestID: "b"}}},
		{Time: at(20), Decoded: []Decoded{{Req: q, NewTokens: 2}},
			SpecDecoded: []SpecDecoded{{RequestID: "b", NewTokens: 4, DraftTokens: 4, AcceptedTokens: 3}}},
		{Time: at(30), SpecDecoded: []SpecDecoded{{RequestID: "b", NewTokens: 1, DraftTokens: 0, AcceptedTokens: 1}}}, // accepted without a draft
		{Time: at(40), Finished: []Finished{{Req: q, Reason: "stop"}, {RequestID: "b", Reason: "stop"}}},
	}
	var rejected []error
	for i := range steps {
		if err := h.tr.Step(&steps[i]); err != nil {
			rejected = append(rejected, err)
		}
	}
	if len(rejected) != 1 || !errors.Is(rejected[0], ReasonAcceptedExceedsDraft) {
		t.Fatalf("rejections %v, want the accepted tokens without a draft rejected", rejected)
	}
	a, b := h.statsOf("a"), h.statsOf("b")
	if a.NumSpecSteps != 0 || a.NumOutputTokens != 3 {
		t.Errorf("a: %d spec steps, %d output tokens; want 0 and 3", a.NumSpecSteps, a.NumOutputTokens)
	}
	if b.NumDraftTokens != 4 || b.NumAcceptedTokens != 3 || b.NumSpecSteps != 1 || b.NumOutputTokens != 5 {
		t.Errorf("b: spec stats %+v", b)
	}
	for _, st := range []RequestStats{a, b} {
		_, spans := h.treeOf(st)
		var dec sdktrace.ReadOnlySpan
		for _, sp := range spans {
			if sp.Name() == attributes.SpanDecode {
				dec = sp
			}
		}
		if dec == nil {
			t.Fatalf("%s: no decode span", st.RequestID)
		}
		if ev := dec.Events(); len(ev) != 2 || sattr(ev[1].Attributes, attributes.StepBatchSize) != "2" {
			t.Errorf("%s: step events %+v, want 2, the mixed step's batch 2", st.RequestID, ev)
		}
	}
}

// SPEC §9: the adapter on RequestStats, the root and every metric, under
// the cardinality guard; the model stays what the client asked for.
func TestLoRAAdapter(t *testing.T) {
	h := newHarness(t, WithAdapters("sql-lora"))
	for _, id := range []string{"a", "b"} {
		adapter := map[string]string{"a": "sql-lora", "b": "junk-lora"}[id]
		h.feed([]Update{arrivedPD(id, 0, "", adapter), queued(id, 1), prefilling(id, 2, 4, 0), decoding(id, 5, 1),
			enFinished(id, 6, "stop")})
	}
	s := h.statsOf("a")
	if s.LoRAAdapter != "sql-lora" || s.Model != "m" {
		t.Fatalf("stats adapter %q model %q", s.LoRAAdapter, s.Model)
	}
	root, _ := h.treeOf(s)
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{attributes.LoRAAdapter.String("sql-lora"), attributes.RequestModel.String("m")})
	rootB, _ := h.treeOf(h.statsOf("b"))
	checkAttrs(t, "root b", rootB.Attributes(), []attribute.KeyValue{attributes.LoRAAdapter.String("junk-lora")})
	h.wantHist(attributes.MetricTimeToFirstToken, 1, 5, attributes.LoRAAdapter.String("sql-lora"))
	h.wantHist(attributes.MetricTimeToFirstToken, 1, 5, attributes.LoRAAdapter.String(attributes.OtherModel))
	h.wantCounter(attributes.MetricRequests, 1, attributes.LoRAAdapter.String("sql-lora"))
	h.wantCounter(attributes.MetricGenerationTokens, 1, attributes.LoRAAdapter.String(attributes.OtherModel))
}

// SPEC §9: encoder runs before and during prefill, one llm.encode each,
// their sum as encode_duration_s and the histogram.
func TestMultimodalEncoding(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrived("v", 0, "m", "chat"), inputProcessed("v", 1, 600), queued("v", 2),
		encoding("v", 3, 2, 576), encoded("v", 9, false),
		prefilling("v", 10, 300, 0), encoding("v", 12, 1, 288), encoded("v", 13, true), prefilling("v", 14, 600, 0),
		decoding("v", 20, 1), enFinished("v", 21, "stop")})
	h.tr.Flush()
	s := h.statsOf("v")
	wantLatency(t, "encode_duration", s.EncodeDuration, 7)
	if s.NumEncoderRuns != 2 {
		t.Fatalf("encoder runs %d", s.NumEncoderRuns)
	}
	wantLatency(t, "queue", s.QueueDuration, 8) // 10 - 2: an encoder run while queued is still queueing
	_, kids := h.treeOf(s)
	var enc []string
	for _, k := range kids {
		if k.Name() == attributes.SpanEncode {
			enc = append(enc, k.Name())
		}
	}
	if len(enc) != 2 {
		t.Fatalf("encode spans %v", enc)
	}
	h.checkTree(s, wantRoot{name: "chat m", start: 0, end: 21, attrs: []attribute.KeyValue{attributes.LatencyEncode.Float64(0.007)}},
		[]wantSpan{
			spInput(0, 1, 600),
			spHandoff(1, 2),
			spQueue(2, 10, attributes.QueueReasonNew),
			spPrefill(10, 20, 600, 0, 2, false, evChunk(14, 1, 600)),
			spDecode(20, 21, 1, 0),
			{name: attributes.SpanEncode, start: 3, end: 9, attrs: []attribute.KeyValue{attributes.EncodeItems.Int(2),
				attributes.EncodeTokens.Int(576), attributes.EncodeCacheHit.Bool(false)}},
			{name: attributes.SpanEncode, start: 12, end: 13, attrs: []attribute.KeyValue{attributes.EncodeItems.Int(1),
				attributes.EncodeCacheHit.Bool(true)}},
		})
	h.wantHist(attributes.MetricEncodeDuration, 1, 7)
}

// An encoder run while a decode instance waits for the KV cache (SPEC §9:
// before or during prefill; the README: while queued, waiting for the KV
// cache, prefilling or preempted) is accepted and changes nothing of the
// transfer or the waits around it.
func TestEncodeDuringKVWait(t *testing.T) {
	h := newHarness(t)
	us := decodeInstance("d", "")
	// After REMOTE_KV_WAIT (4) and before REMOTE_KV_READY (14).
	us = append(us[:4], append([]Update{encoding("d", 5, 1, 576), encoded("d", 9, false)}, us[4:]...)...)
	h.feed(us)
	s := h.statsOf("d")
	wantLatency(t, "encode_duration", s.EncodeDuration, 4)
	wantLatency(t, "kv_transfer", s.KVTransferDuration, 10)
	wantLatency(t, "queue", s.QueueDuration, 4) // (4 - 2) + (16 - 14): the transfer is not queueing
	_, kids := h.treeOf(s)
	n := 0
	for _, k := range kids {
		if k.Name() == attributes.SpanEncode {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d encode spans, want 1", n)
	}
	if r := h.rejects(ReasonBadTransition); r != 0 {
		t.Fatalf("%d updates rejected", r)
	}
}

// Detail level 0 (root only) keeps SPEC §7–9's root attributes.
func TestServingAttributesAtDetailRoot(t *testing.T) {
	h := newHarness(t, WithDetail(DetailRoot))
	h.feed(decodeInstance("d", ""))
	root, kids := h.treeOf(h.statsOf("d"))
	if len(kids) != 0 {
		t.Fatalf("%d children at detail 0", len(kids))
	}
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{attributes.PDRole.String(PDRoleDecode),
		attributes.LatencyKVTransfer.Float64(0.010)})
	h.feed(specRequest("s"))
	h.tr.Flush() // the frontend is present (it reported for d): the log's end ends the wait
	root, _ = h.treeOf(h.statsOf("s"))
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{attributes.SpecAcceptanceRate.Float64(0.5)})
}

// The router's view of P/D (SPEC §7): llm.pd.prefill_duration_s and
// llm.pd.decode_ttft_s on its root, beside the client's TTFT.
func TestRoutedPD(t *testing.T) {
	h := newHarness(t)
	q, _ := h.tr.Arrive(context.Background(), "route", Arrival{Time: at(0), Model: "m"})
	if err := q.RoutedPD(at(1), at(40), at(41)); err != nil {
		t.Fatal(err)
	}
	if err := q.Detokenized(at(60), 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.Finish(at(70), "stop"); err != nil {
		t.Fatal(err)
	}
	s := h.statsOf("route")
	wantLatency(t, "pd prefill", s.PDPrefillDuration, 39)
	wantLatency(t, "pd decode ttft", s.PDDecodeTTFT, 19)
	wantLatency(t, "ttft", s.FirstTokenLatency, 60)
	root, _ := h.treeOf(s)
	checkAttrs(t, "root", root.Attributes(), []attribute.KeyValue{attributes.PDPrefillDuration.Float64(0.039),
		attributes.PDDecodeTTFT.Float64(0.019)})
	if err := q.RoutedPD(at(1), at(2), at(3)); !errors.Is(err, ReasonAfterFinished) {
		t.Errorf("RoutedPD after the finish: %v", err)
	}
	q2, _ := h.tr.Arrive(context.Background(), "back", Arrival{Time: at(0), Model: "m"})
	if err := q2.RoutedPD(at(5), at(4), at(6)); !errors.Is(err, ReasonBadTimestamp) {
		t.Errorf("a response before its send: %v", err)
	}
}

// One trace across instances: P's and D's trackers, given the router's
// context, put their roots under the router's root.
func TestPDOneTrace(t *testing.T) {
	h := newHarness(t)
	router, _ := h.tr.Arrive(context.Background(), "client-1", Arrival{Time: at(0), Model: "m"})
	ctx := router.Context(context.Background())
	for _, role := range []string{PDRolePrefill, PDRoleDecode} {
		q, err := h.tr.Arrive(ctx, role+"-1", Arrival{Time: at(1), Model: "m", PDRole: role})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Finish(at(9), "stop"); err != nil {
			t.Fatal(err)
		}
	}
	if err := router.Finish(at(10), "stop"); err != nil {
		t.Fatal(err)
	}
	rs := h.statsOf("client-1")
	for _, role := range []string{PDRolePrefill, PDRoleDecode} {
		s := h.statsOf(role + "-1")
		if s.TraceID != rs.TraceID {
			t.Errorf("%s's trace %s, the router's %s", role, s.TraceID, rs.TraceID)
		}
		for _, sp := range h.rec.Ended() {
			if sp.SpanContext().SpanID().String() == s.SpanID && sp.Parent().SpanID() != router.SpanContext().SpanID() {
				t.Errorf("%s's root parent %v, want the router's root", role, sp.Parent().SpanID())
			}
		}
	}
}

// The stats log line adds speculative acceptance and KV-transfer
// throughput, as vLLM's logger does.
func TestStatsLogServing(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Second))
	h.tr.RecordSchedulerStats(at(0), SchedulerStats{Running: 1})
	h.feed(specRequest("s"))
	h.feed(decodeInstance("d", ""))
	h.tr.Flush()
	h.tr.RecordSchedulerStats(at(2000), SchedulerStats{Running: 1})
	out := logs.String()
	for _, want := range []string{"Spec decode draft acceptance rate: 50.0%", "mean acceptance length: 3.00", "KV transfer"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// A WithPDRole tracker: its scheduler gauges carry llm.pd.role, its
// arrivals take the role, and the prompt tokens whose KV was transferred
// are not its prompt throughput.
func TestWithPDRole(t *testing.T) {
	var logs bytes.Buffer
	h := newHarness(t, WithPDRole(PDRoleDecode), WithStatsLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Second))
	h.tr.RecordSchedulerStats(at(0), SchedulerStats{Running: 3, Waiting: 1, KVCacheUsage: 0.5})
	u := decodeInstance("d", "")
	u[0].PDRole = "" // the tracker's role applies
	h.feed(u)
	if s := h.statsOf("d"); s.PDRole != PDRoleDecode {
		t.Fatalf("pd_role %q, want the tracker's", s.PDRole)
	}
	for _, m := range []string{attributes.MetricRequestsRunning, attributes.MetricRequestsWaiting, attributes.MetricKVCacheUsage} {
		if sets := attrSetsOf(h.metrics()[m]); len(sets) != 1 || !hasAll(sets[0], []attribute.KeyValue{attributes.PDRole.String(PDRoleDecode)}) {
			t.Errorf("%s attributes %v, want llm.pd.role=decode", m, sets)
		}
	}
	h.tr.RecordSchedulerStats(at(1000), SchedulerStats{Running: 1})
	// 100 computed, 96 of them transferred: 4 tokens of prompt work in 1 s.
	if st := h.tr.LastStats(); st.PromptThroughput != 4 {
		t.Errorf("prompt throughput %v tokens/s, want 4 (the transferred tokens are P's)", st.PromptThroughput)
	}
}
