package otelstats

import (
	"math/rand"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// genServing is one random request with SPEC §7–9's features, each side on
// its own clock, the engine's skewed against the frontend's by up to 20 ms.
func genServing(rng *rand.Rand, id string) (fe, en []Update) {
	skew := float64(rng.Intn(41) - 20)
	ft, et := 100.0, 100.0+skew
	fstep := func() float64 { ft += float64(rng.Intn(5)); return ft }
	estep := func() float64 { et += float64(rng.Intn(5)); return et }
	deliver := func(n int) {
		ft = max(fstep(), et+float64(rng.Intn(3)))
		fe = append(fe, detok(id, ft, n, 0))
	}
	a := arrived(id, fstep(), "m", "chat")
	pd := rng.Intn(2) == 0
	if pd {
		a.PDRole = PDRoleDecode
	}
	if rng.Intn(2) == 0 {
		a.LoRAAdapter = "lora"
	}
	fe = append(fe, a, inputProcessed(id, fstep(), 100))
	en = append(en, queued(id, estep()))
	enc := func() {
		if rng.Intn(3) == 0 {
			en = append(en, encoding(id, estep(), 1, 5), encoded(id, estep(), rng.Intn(2) == 0))
		}
	}
	enc()
	remote := 0
	if pd {
		remote = 50
		en = append(en, kvWait(id, estep(), "p", 50))
		enc()
		status := ""
		if rng.Intn(4) == 0 {
			status, remote = KVStatusFailed, 0
		}
		en = append(en, kvReady(id, estep(), remote, 1000, status))
	}
	en = append(en, prefilling(id, estep(), 60+remote/2, 0))
	enc()
	en = append(en, prefilling(id, estep(), 100, 0))
	out := 0
	for i := range 1 + rng.Intn(5) {
		if i > 0 && rng.Intn(5) == 0 {
			en = append(en, preempted(id, estep()))
			enc()
			en = append(en, prefilling(id, estep(), 100+out, 0))
		}
		n := 1
		if rng.Intn(2) == 0 {
			acc := rng.Intn(4)
			n = acc + 1
			en = append(en, specDecoding(id, estep(), n, 3, min(acc, 3)))
		} else {
			en = append(en, decoding(id, estep(), 1))
		}
		out += n
		deliver(n)
	}
	en = append(en, enFinished(id, estep(), "stop"))
	fe = append(fe, feFinished(id, fstep(), "stop"))
	return fe, en
}

// servingFeed records us on a fresh harness with both sides present and
// returns the request's stats.
func servingFeed(t *testing.T, seed int64, us []Update) (*harness, RequestStats) {
	t.Helper()
	h := newHarness(t)
	h.tr.SideConnected(SideFrontend)
	h.tr.SideConnected(SideEngine)
	for _, u := range us {
		if err := h.tr.Record(u); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
	h.tr.Flush()
	return h, h.statsOf("x")
}

// SPEC §1, §3, §7–9: random requests with a KV transfer, encoder runs,
// speculative steps and preemptions, the engine's clock skewed against the
// frontend's, the two sides' streams interleaved at random: every value
// lies in [0, e2e]; queue_duration_s, kv_transfer_duration_s and
// encode_duration_s are what their spans show; and the stats equal those
// of the same updates fed in time order.
func TestServingRandomSkewAndOrder(t *testing.T) {
	seeds := int64(200)
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		rng := rand.New(rand.NewSource(seed))
		fe, en := genServing(rng, "x")
		us := []Update{fe[0]}
		for i, j := 1, 0; i < len(fe) || j < len(en); {
			if j >= len(en) || i < len(fe) && rng.Intn(2) == 0 {
				us, i = append(us, fe[i]), i+1
			} else {
				us, j = append(us, en[j]), j+1
			}
		}
		h, s := servingFeed(t, seed, us)
		root, kids := h.treeOf(s)
		checkValuesAreSpans(t, &s, root, kids)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
		var queue, kv, enc time.Duration
		for _, k := range kids {
			d := k.EndTime().Sub(k.StartTime())
			switch k.Name() {
			case attributes.SpanQueue:
				if v, _ := attrOf(k.Attributes(), attributes.QueueReason); v.AsString() != attributes.QueueReasonPreempted {
					queue += d
				}
			case attributes.SpanKVTransfer:
				kv = d
			case attributes.SpanEncode:
				enc += d
			}
		}
		if s.QueueDuration.Value != queue || s.KVTransferDuration.Value != kv || s.EncodeDuration.Value != enc {
			t.Fatalf("seed %d: queue %v, spans %v; kv %v, span %v; encode %v, spans %v\n%s", seed, s.QueueDuration.Value, queue,
				s.KVTransferDuration.Value, kv, s.EncodeDuration.Value, enc, s.AppendJSON(nil))
		}
		for name, l := range map[string]Latency{"queue": s.QueueDuration, "ttft": s.FirstTokenLatency, "prefill": s.PrefillLatency,
			"decode": s.DecodeLatency, "inference": s.InferenceLatency, "kv_transfer": s.KVTransferDuration, "encode": s.EncodeDuration} {
			if l.Value < 0 || l.Value > s.E2ELatency.Value {
				t.Fatalf("seed %d: %s %v outside [0, e2e %v]", seed, name, l.Value, s.E2ELatency.Value)
			}
		}
		// The same updates in time order (ARRIVED first; stable).
		all := append(append([]Update(nil), fe...), en...)
		for a := 2; a < len(all); a++ {
			for b := a; b > 1 && all[b].Time.Before(all[b-1].Time); b-- {
				all[b], all[b-1] = all[b-1], all[b]
			}
		}
		_, s2 := servingFeed(t, seed, all)
		s.TraceID, s.SpanID, s.ClampedSpans = "", "", 0
		s2.TraceID, s2.SpanID, s2.ClampedSpans = "", "", 0
		if a, b := string(s.AppendJSON(nil)), string(s2.AppendJSON(nil)); a != b {
			t.Fatalf("seed %d: interleaved and time-ordered differ:\n%s\n%s", seed, a, b)
		}
	}
}
