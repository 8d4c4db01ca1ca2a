package otelstats

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// The fuzz input is a config byte followed by 4-byte groups [op, a, b, c]:
//
//	op bits 0-1  request index (mod 2 or 3 ids)
//	op bits 2-3  0: Record one update; 1: the same through the Request
//	             handle (Arrive for ARRIVED, Detokenized for a frontend
//	             DETOKENIZED); 2: a Step whose c%4+1 entries are the
//	             following groups (an entry's op bit 2: by handle); 3: Sweep
//	             / Flush / far Sweep / scheduler stats (by a%4)
//	op bits 4-5  model: "", "m0", "m1", "" (ARRIVED: "m0", "m0", "m1", "")
//	op bits 6-7  side: auto, frontend, engine, invalid
//	a            kind a%10 (0 and 9 are invalid kinds)
//	b            time step on the side's own clock: b < 224 → b-32 ms (so
//	             it may go backwards); b >= 224 → (b-224)*200 ms
//	c            counts: prompt and computed c-5, cached c>>2, new tokens
//	             c%5-1, busy c*10µs, finish reason by c%5 ("" = missing);
//	             FINISHED carries prompt (c&0x7f)-5 when c&0x80 is set
//
// The two sides keep separate clocks, so their updates are skewed against
// each other as much as the input likes.
const (
	fzRecord  = 0
	fzHandle  = 1
	fzStep    = 2
	fzSpecial = 3
)

var fzReasons = [...]string{"stop", "length", "abort", "error", ""}

type fuzzRun struct {
	h        *harness
	ids      []string
	handles  map[string]*Request
	clock    [3]time.Time // by Side: auto (unused), frontend, engine
	returned int          // rejections returned to the caller
}

func (f *fuzzRun) tick(side Side, b byte) time.Time {
	if side > SideEngine {
		side = SideEngine
	}
	if side == SideAuto {
		side = SideFrontend
	}
	var d time.Duration
	if b < 224 {
		d = time.Duration(int(b)-32) * time.Millisecond
	} else {
		d = time.Duration(b-224) * 200 * time.Millisecond
	}
	f.clock[side] = f.clock[side].Add(d)
	return f.clock[side]
}

func (f *fuzzRun) latest() time.Time {
	if f.clock[SideEngine].After(f.clock[SideFrontend]) {
		return f.clock[SideEngine]
	}
	return f.clock[SideFrontend]
}

func (f *fuzzRun) checkErr(err error, n int) {
	t := f.h.t
	if err == nil {
		return
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("error is not a rejection: %v", err)
	}
	var re *RejectError
	if !errors.As(err, &re) || re.Reason == "" {
		t.Fatalf("error without a *RejectError: %v", err)
	}
	f.returned += n
}

func runFuzzSequence(t *testing.T, data []byte) { runFuzzSequenceH(t, data, nil) }

// runFuzzSequenceH is runFuzzSequence handing its harness to inspect (for
// debugging a finding).
func runFuzzSequenceH(t *testing.T, data []byte, inspect func(*harness)) {
	if len(data) == 0 {
		return
	}
	cfg := data[0]
	data = data[1:]
	opts := []Option{WithHoldWindow(50 * time.Millisecond)}
	if cfg&2 != 0 {
		opts = append(opts, WithFrontendGrace(50*time.Millisecond))
	}
	if cfg&4 != 0 {
		opts = append(opts, WithMaxInFlight(2))
	}
	if cfg&8 != 0 {
		opts = append(opts, WithRequestTTL(300*time.Millisecond))
	}
	f := &fuzzRun{h: newHarness(t, opts...), ids: []string{"r0", "r1"}, handles: map[string]*Request{}}
	if cfg&1 != 0 {
		f.ids = append(f.ids, "r2")
	}
	f.clock[SideFrontend] = base
	f.clock[SideEngine] = base.Add(time.Duration(int(int8(cfg))) * time.Millisecond) // initial skew
	tr := f.h.tr

	for len(data) >= 4 {
		op, a, b, c := data[0], data[1], data[2], data[3]
		data = data[4:]
		id := f.ids[int(op&3)%len(f.ids)]
		model := [...]string{"", "m0", "m1", ""}[op>>4&3]
		side := Side(op >> 6)
		switch op >> 2 & 3 {
		case fzStep:
			s := Step{Time: f.tick(SideEngine, b), Model: model}
			for k := int(c%4) + 1; k > 0 && len(data) >= 4; k-- {
				op2, a2, b2, c2 := data[0], data[1], data[2], data[3]
				data = data[4:]
				id2 := f.ids[int(op2&3)%len(f.ids)]
				// op2 bit 2: name the request by the handle its last
				// Arrive returned (it may have finished since, or be a
				// rejected arrival's), when there is one.
				var q2 *Request
				if op2&4 != 0 {
					q2 = f.handles[id2]
				}
				switch a2 % 6 {
				case 0:
					if q2 != nil {
						s.QueuedReqs = append(s.QueuedReqs, q2)
					} else {
						s.Queued = append(s.Queued, id2)
					}
				case 1:
					if q2 != nil {
						s.PreemptedReqs = append(s.PreemptedReqs, q2)
					} else {
						s.Preempted = append(s.Preempted, id2)
					}
				case 2:
					s.Scheduled = append(s.Scheduled, Scheduled{Req: q2, RequestID: id2, ComputedTokens: int(c2) - 5, CachedTokens: int(c2 >> 2)})
				case 3:
					s.Decoded = append(s.Decoded, Decoded{Req: q2, RequestID: id2, NewTokens: int(c2%5) - 1})
				case 4:
					s.Finished = append(s.Finished, Finished{Req: q2, RequestID: id2, Reason: fzReasons[c2%5]})
				case 5:
					s.Stats = &SchedulerStats{Running: int(b2), Waiting: int(c2), KVCacheUsage: float64(b2) / 255}
				}
			}
			// (Step may also sweep: held updates of other requests can be
			// rejected during the call, so its count is not bounded by n.)
			if err := tr.Step(&s); err != nil {
				f.checkErr(err, 0)
				errs, ok := err.(interface{ Unwrap() []error })
				if !ok || len(errs.Unwrap()) > maxStepErrors {
					t.Fatalf("Step error %T is not a join of at most %d rejections", err, maxStepErrors)
				}
				for _, e := range errs.Unwrap() {
					f.checkErr(e, 1)
				}
			}
		case fzSpecial:
			switch a % 4 {
			case 0:
				tr.Sweep(f.latest())
			case 1:
				tr.Flush()
			case 2:
				tr.Sweep(f.latest().Add(10 * time.Second))
			case 3:
				tr.RecordSchedulerStats(f.latest(), SchedulerStats{Running: int(b), Waiting: int(c), KVCacheUsage: float64(c) / 255})
			}
		default:
			kind := Kind(a % 10)
			u := Update{
				RequestID: id, Kind: kind, Model: model,
				NumPromptTokens:   int(c) - 5,
				NumComputedTokens: int(c) - 5,
				NumCachedTokens:   int(c >> 2),
				NumNewTokens:      int(c%5) - 1,
				Busy:              time.Duration(c) * 10 * time.Microsecond,
				FinishReason:      fzReasons[c%5],
			}
			switch side {
			case 1:
				u.Side = SideFrontend
			case 2:
				u.Side = SideEngine
			case 3:
				u.Side = Side(3)
			}
			if kind == KindArrived {
				u.Model = [...]string{"m0", "m0", "m1", ""}[op>>4&3]
			}
			switch {
			case kind == KindFinished && c&0x80 != 0:
				u.NumPromptTokens = int(c&0x7f) - 5
			case kind != KindInputProcessed:
				u.NumPromptTokens = 0
			}
			s := u.Side
			if s == SideAuto {
				s = sideOf(kind)
			}
			u.Time = f.tick(s, b)
			q := f.handles[id]
			switch {
			case op>>2&3 == fzHandle && kind == KindArrived:
				q, err := tr.Arrive(t.Context(), id, Arrival{Time: u.Time, Model: u.Model})
				f.checkErr(err, 1)
				if q == nil {
					t.Fatal("Arrive returned a nil handle")
				}
				f.handles[id] = q
			case op>>2&3 == fzHandle && q != nil && kind == KindDetokenized && u.Side <= SideFrontend:
				// The delivery's own fast path.
				f.checkErr(q.Detokenized(u.Time, u.NumNewTokens, u.Busy), 1)
			case op>>2&3 == fzHandle && q != nil:
				f.checkErr(q.Record(u), 1)
			default:
				f.checkErr(tr.Record(u), 1)
			}
		}
	}

	tr.Flush()
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if inspect != nil {
		inspect(f.h)
	}
	checkFuzzInvariants(t, f)
}

func checkFuzzInvariants(t *testing.T, f *fuzzRun) {
	h := f.h
	if n := h.tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after Shutdown", n)
	}

	// RequestStats: no negative duration, absent values are zero, TTFT
	// within e2e, presence follows the token count.
	var nTTFT, nTPOT, nITL, nQueue uint64
	var out, pre int64
	for i := range h.stats {
		s := &h.stats[i]
		lat := map[string]Latency{
			"e2e": s.E2ELatency, "queue": s.QueueDuration, "ttft": s.FirstTokenLatency,
			"prefill": s.PrefillLatency, "decode": s.DecodeLatency, "inference": s.InferenceLatency,
			"tpot": s.TimePerOutputToken,
		}
		for name, l := range lat {
			if l.Value < 0 {
				t.Fatalf("%s: %s = %v < 0", s.RequestID, name, l.Value)
			}
			if !l.Valid && l.Value != 0 {
				t.Fatalf("%s: absent %s carries %v", s.RequestID, name, l.Value)
			}
		}
		if !s.E2ELatency.Valid {
			t.Fatalf("%s: e2e absent", s.RequestID)
		}
		if s.PreemptedDuration < 0 || s.PreemptedDuration > s.E2ELatency.Value {
			t.Fatalf("%s: preempted %v < 0", s.RequestID, s.PreemptedDuration)
		}
		for _, g := range s.OutputTokenLatencies {
			if g < 0 {
				t.Fatalf("%s: negative ITL %v", s.RequestID, g)
			}
		}
		if s.NumOutputTokens < 0 || s.NumPreemptions < 0 || s.NumRecomputeCachedTokens < 0 ||
			(s.NumPromptTokens.Valid && s.NumPromptTokens.N < 0) || (s.NumCachedTokens.Valid && s.NumCachedTokens.N < 0) {
			t.Fatalf("%s: negative count in %s", s.RequestID, s.AppendJSON(nil))
		}
		if s.FirstTokenLatency.Valid && s.FirstTokenLatency.Value > s.E2ELatency.Value {
			t.Fatalf("%s: TTFT %v > e2e %v: %s", s.RequestID, s.FirstTokenLatency.Value, s.E2ELatency.Value, s.AppendJSON(nil))
		}
		// The instants are clamped into [ARRIVED, FINISHED] (SPEC §3), so
		// every phase fits in e2e and TTFT + decode is e2e exactly.
		for name, l := range lat {
			if l.Value > s.E2ELatency.Value {
				t.Fatalf("%s: %s %v > e2e %v: %s", s.RequestID, name, l.Value, s.E2ELatency.Value, s.AppendJSON(nil))
			}
		}
		if s.FirstTokenLatency.Valid && s.FirstTokenLatency.Value+s.DecodeLatency.Value != s.E2ELatency.Value {
			t.Fatalf("%s: TTFT %v + decode %v != e2e %v", s.RequestID, s.FirstTokenLatency.Value, s.DecodeLatency.Value, s.E2ELatency.Value)
		}
		// Tokens without a TTFT: the engine's, made after the client's
		// failed FINISHED, before any delivery (tokensAfterClient).
		if s.FirstTokenLatency.Valid && s.NumOutputTokens == 0 ||
			!s.FirstTokenLatency.Valid && s.NumOutputTokens > 0 && !isFailure(s.FinishReason) {
			t.Fatalf("%s: TTFT valid %v with %d tokens", s.RequestID, s.FirstTokenLatency.Valid, s.NumOutputTokens)
		}
		if s.TimePerOutputToken.Valid != (s.FirstTokenLatency.Valid && s.NumOutputTokens > 1) {
			t.Fatalf("%s: TPOT valid %v with %d tokens", s.RequestID, s.TimePerOutputToken.Valid, s.NumOutputTokens)
		}
		if s.FinishReason == "" {
			t.Fatalf("%s: empty finish reason", s.RequestID)
		}
		if s.FirstTokenLatency.Valid {
			nTTFT++
		}
		if s.TimePerOutputToken.Valid {
			nTPOT++
		}
		if s.QueueDuration.Valid {
			nQueue++
		}
		nITL += uint64(len(s.OutputTokenLatencies))
		out += int64(s.NumOutputTokens)
		pre += int64(s.NumPreemptions)
	}

	// Span trees: every child is a direct child of its root, inside it,
	// with end >= start; one root per finished request.
	roots := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var kids []sdktrace.ReadOnlySpan
	for _, sp := range h.rec.Ended() {
		if !sp.Parent().IsValid() || sp.Parent().IsRemote() {
			roots[sp.SpanContext().SpanID()] = sp
		} else {
			kids = append(kids, sp)
		}
	}
	if len(roots) != len(h.stats) {
		t.Fatalf("%d root spans for %d finished requests", len(roots), len(h.stats))
	}
	byRoot := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, k := range kids {
		if _, ok := roots[k.Parent().SpanID()]; !ok {
			t.Fatalf("%s's parent %s is not a root", k.Name(), k.Parent().SpanID())
		}
		byRoot[k.Parent().SpanID()] = append(byRoot[k.Parent().SpanID()], k)
	}
	bySpan := make(map[string]*RequestStats, len(h.stats))
	for i := range h.stats {
		bySpan[h.stats[i].SpanID] = &h.stats[i]
	}
	for id, r := range roots {
		checkInside(t, r, byRoot[id])
		if s := bySpan[id.String()]; s != nil {
			checkValuesAreSpans(t, s, r, byRoot[id])
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	// Metrics agree with the RequestStats (one collection).
	ms := h.metrics()
	sum := func(name string) (int64, bool) {
		d, ok := ms[name]
		if !ok {
			return 0, false
		}
		var v int64
		for _, p := range d.(metricdata.Sum[int64]).DataPoints {
			v += p.Value
		}
		return v, true
	}
	count := func(name string) uint64 {
		d, ok := ms[name]
		if !ok {
			return 0
		}
		var c uint64
		for _, p := range d.(metricdata.Histogram[float64]).DataPoints {
			c += p.Count
		}
		return c
	}
	n := uint64(len(h.stats))
	if got, _ := sum(attributes.MetricRequests); got != int64(n) {
		t.Fatalf("llm.server.requests = %d, want %d", got, n)
	}
	for name, want := range map[string]uint64{
		attributes.MetricRequestDuration:    n,
		attributes.MetricTimeToFirstToken:   nTTFT,
		attributes.MetricTimePerOutputToken: nTPOT,
		attributes.MetricQueueDuration:      nQueue,
		attributes.MetricInterTokenLatency:  nITL,
	} {
		if got := count(name); got != want {
			t.Fatalf("%s count = %d, want %d", name, got, want)
		}
	}
	if got, _ := sum(attributes.MetricGenerationTokens); got != out {
		t.Fatalf("generation tokens = %d, want %d", got, out)
	}
	if got, _ := sum(attributes.MetricPreemptions); got != pre {
		t.Fatalf("preemptions = %d, want %d", got, pre)
	}
	if got, _ := sum(attributes.MetricRejectedUpdates); got < int64(f.returned) {
		t.Fatalf("llm.rejected_updates = %d < %d rejections returned", got, f.returned)
	}
}

// fz encodes one Record group for seeds.
func fz(idx int, model, side int, kind Kind, dtMs int, c byte) []byte {
	return []byte{byte(idx&3) | byte(model&3)<<4 | byte(side&3)<<6, byte(kind), byte(dtMs + 32), c}
}

func fzSeed(cfg byte, groups ...[]byte) []byte {
	out := []byte{cfg}
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func FuzzUpdateSequence(f *testing.F) {
	const fe, en = 1, 2
	// A plain two-sided request: prompt 10 (c=15), chunk 10 computed, 3
	// cached (15>>2), single-token decodes (c=2 → 1), reason stop (c=0).
	plain := [][]byte{
		fz(0, 1, 0, KindArrived, 0, 0),
		fz(0, 0, 0, KindInputProcessed, 1, 15),
		fz(0, 0, en, KindQueued, 2, 0),
		fz(0, 0, en, KindPrefilling, 3, 15),
		fz(0, 0, en, KindDecoding, 10, 2),
		fz(0, 0, fe, KindDetokenized, 20, 2),
		fz(0, 0, en, KindDecoding, 10, 2),
		fz(0, 0, fe, KindDetokenized, 10, 2),
		fz(0, 0, en, KindFinished, 1, 0),
		fz(0, 0, fe, KindFinished, 2, 0),
	}
	f.Add(fzSeed(0, plain...))
	// The same, engine clock 50 ms behind and a second request interleaved.
	var two [][]byte
	for i, g := range plain {
		two = append(two, g)
		g2 := append([]byte(nil), g...)
		g2[0] |= 1
		if i == 0 {
			g2[0] = g2[0]&^(3<<4) | 2<<4 // model m1
		}
		two = append(two, g2)
	}
	f.Add(fzSeed(byte(256-50)&^15, two...))
	// Preemption and recompute, then only the engine finishes (grace).
	f.Add(fzSeed(2,
		fz(1, 1, 0, KindArrived, 0, 0),
		fz(1, 0, 0, KindInputProcessed, 1, 40),
		fz(1, 0, en, KindQueued, 1, 0),
		fz(1, 0, en, KindPrefilling, 1, 20),
		fz(1, 0, en, KindPreempted, 5, 0),
		fz(1, 0, en, KindPrefilling, 20, 40),
		fz(1, 0, en, KindDecoding, 10, 3),
		fz(1, 0, en, KindDecoding, 10, 4),
		fz(1, 0, en, KindFinished, 1, 1),
		[]byte{3 << 2, 2, 32, 0}, // far sweep
	))
	// Engine updates before ARRIVED, a Step, an abort, the TTL.
	f.Add(fzSeed(9,
		fz(2, 0, en, KindQueued, 0, 0),
		fz(2, 1, 0, KindArrived, 1, 0),
		[]byte{2<<2 | 2, 0, 40, 2}, // Step with 3 entries
		[]byte{2, 2, 0, 15},        // Scheduled r2
		[]byte{2, 3, 0, 2},         // Decoded r2
		[]byte{2, 5, 9, 9},         // stats
		fz(2, 0, fe, KindFinished, 5, 2),
		fz(0, 1, 0, KindArrived, 0, 0),
		fz(0, 0, 0, KindDetokenized, 100, 3),
		[]byte{3 << 2, 0, 250, 0}, // sweep after the TTL
	))
	// Bad input: negative counts, time backwards, wrong side, bad kinds.
	f.Add(fzSeed(4,
		fz(0, 1, 0, KindArrived, 0, 0),
		fz(0, 0, 0, KindInputProcessed, -20, 0),
		fz(0, 0, 3, KindQueued, 1, 0),
		fz(0, 0, en, 0, 1, 0),
		fz(0, 0, en, 9, 1, 0),
		fz(0, 0, en, KindDecoding, 1, 0),
		fz(1, 3, 0, KindArrived, 1, 0),
		fz(0, 0, fe, KindFinished, 1, 4),
	))
	f.Fuzz(runFuzzSequence)
}

// checkValuesAreSpans: SPEC §3, "the metrics of section 2 are the same
// instants as these span boundaries", under any skew and order.
func checkValuesAreSpans(t *testing.T, s *RequestStats, root sdktrace.ReadOnlySpan, kids []sdktrace.ReadOnlySpan) {
	t.Helper()
	var preempted, queued time.Duration
	var firstDecode, firstPrefill sdktrace.ReadOnlySpan
	prefillEnds := map[time.Time]bool{}
	prefills := 0
	for _, k := range kids {
		d := k.EndTime().Sub(k.StartTime())
		switch k.Name() {
		case attributes.SpanQueue:
			if v, _ := attrOf(k.Attributes(), attributes.QueueReason); v.AsString() == attributes.QueueReasonPreempted {
				preempted += d
			} else {
				queued += d
			}
		case attributes.SpanPrefill:
			prefills++
			prefillEnds[k.EndTime()] = true
			if firstPrefill == nil || k.StartTime().Before(firstPrefill.StartTime()) {
				firstPrefill = k
			}
		case attributes.SpanDecode:
			if v, _ := attrOf(k.Attributes(), attributes.DecodeSegment); v.AsInt64() == 0 {
				firstDecode = k
			}
		}
	}
	if e2e := root.EndTime().Sub(root.StartTime()); s.E2ELatency.Value != e2e {
		t.Errorf("%s: e2e %v, root lasts %v", s.RequestID, s.E2ELatency.Value, e2e)
	}
	if prefills < maxRuns && s.PreemptedDuration != preempted {
		t.Errorf("%s: preempted_duration_s %v, its llm.queue (preempted) spans %v: %s", s.RequestID, s.PreemptedDuration, preempted, s.AppendJSON(nil))
	}
	if s.QueueDuration.Valid && s.QueueDuration.Value != queued {
		t.Errorf("%s: queue_duration_s %v, its llm.queue (new) spans %v: %s", s.RequestID, s.QueueDuration.Value, queued, s.AppendJSON(nil))
	}
	// The first token: where the first decode segment starts, and, unless
	// skew made the instants contradict each other (a token delivered
	// before its prefill began, clamped), where a prefill ends.
	if s.FirstTokenLatency.Valid && firstDecode != nil {
		at := firstDecode.StartTime()
		if s.FirstTokenLatency.Value != at.Sub(root.StartTime()) || !prefillEnds[at] && s.ClampedSpans == 0 {
			t.Errorf("%s: TTFT %v, the first llm.decode starts at +%v (a prefill ends there: %v): %s",
				s.RequestID, s.FirstTokenLatency.Value, at.Sub(root.StartTime()), prefillEnds[at], s.AppendJSON(nil))
		}
		if d := root.EndTime().Sub(at); s.DecodeLatency.Value != d {
			t.Errorf("%s: decode %v, first llm.decode start to the root's end %v: %s", s.RequestID, s.DecodeLatency.Value, d, s.AppendJSON(nil))
		}
		if firstPrefill != nil {
			if d := max(at.Sub(firstPrefill.StartTime()), 0); s.PrefillLatency.Value != d {
				t.Errorf("%s: prefill %v, first llm.prefill start to the first token %v: %s", s.RequestID, s.PrefillLatency.Value, d, s.AppendJSON(nil))
			}
		}
	}
	if s.InferenceLatency.Valid && firstPrefill != nil {
		if d := root.EndTime().Sub(firstPrefill.StartTime()); s.InferenceLatency.Value != d {
			t.Errorf("%s: inference %v, first llm.prefill start to the root's end %v: %s", s.RequestID, s.InferenceLatency.Value, d, s.AppendJSON(nil))
		}
	}
}
