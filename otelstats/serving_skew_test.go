package otelstats

import (
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §3, §7, §9: the values are the instants that bound the spans. When
// skew between the two sides puts engine instants outside the root, both
// are clamped alike: queue_duration_s is the two waits around the transfer
// as their llm.queue spans show them, kv_transfer_duration_s is the
// llm.kv_transfer span, encode_duration_s the llm.encode spans — none
// exceeds e2e, none mixes a clamped instant with an unclamped one.
func TestServingValuesMatchSpansUnderSkew(t *testing.T) {
	for _, tc := range []struct {
		name              string
		us                []Update
		queue, kv, encode float64 // ms; -1: absent
	}{
		{
			name: "engine clock behind: queued and the transfer's start before ARRIVED",
			us: []Update{arrivedPD("s", 100, PDRoleDecode, ""), inputProcessed("s", 101, 100), queued("s", 95),
				kvWait("s", 97, "p", 96), kvReady("s", 120, 96, 10, ""), prefilling("s", 125, 100, 0),
				decoding("s", 130, 1), detok("s", 131, 1, 0), enFinished("s", 135, "stop"), feFinished("s", 136, "stop")},
			queue: 5, kv: 20, encode: -1, // queue (new) 100–100, transfer 100–120, queue (kv_ready) 120–125
		},
		{
			name: "engine clock ahead: the transfer ends after the client's FINISHED",
			us: []Update{arrivedPD("s", 0, PDRoleDecode, ""), inputProcessed("s", 1, 100), queued("s", 2),
				kvWait("s", 4, "p", 96), detok("s", 11, 1, 0), feFinished("s", 12, "stop"),
				kvReady("s", 14, 96, 10, ""), prefilling("s", 16, 100, 0), decoding("s", 20, 1), enFinished("s", 25, "stop")},
			queue: 2, kv: 8, encode: -1, // queue (new) 2–4, transfer 4–12, queue (kv_ready) 12–12
		},
		{
			name:  "no skew",
			us:    decodeInstance("s", ""),
			queue: 4, kv: 10, encode: -1,
		},
		{
			name: "an encoder run before ARRIVED",
			us: []Update{arrived("s", 100, "m", "chat"), inputProcessed("s", 101, 10), queued("s", 90), encoding("s", 92, 1, 5),
				encoded("s", 98, false), prefilling("s", 99, 10, 0), encoding("s", 99, 1, 5), encoded("s", 104, false),
				decoding("s", 110, 1), enFinished("s", 111, "stop"), feFinished("s", 112, "stop")},
			queue: 0, kv: -1, encode: 4, // the runs clamped: 100–100 and 100–104
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.us)
			s := h.statsOf("s")
			_, kids := h.treeOf(s)
			var queue, kv, enc time.Duration
			var sawKV, sawEnc bool
			for _, k := range kids {
				d := k.EndTime().Sub(k.StartTime())
				switch k.Name() {
				case attributes.SpanQueue:
					queue += d
				case attributes.SpanKVTransfer:
					kv, sawKV = d, true
				case attributes.SpanEncode:
					enc, sawEnc = enc+d, true
				}
			}
			for _, c := range []struct {
				what string
				got  Latency
				span time.Duration
				saw  bool
				want float64
			}{
				{"queue_duration_s", s.QueueDuration, queue, true, tc.queue},
				{"kv_transfer_duration_s", s.KVTransferDuration, kv, sawKV, tc.kv},
				{"encode_duration_s", s.EncodeDuration, enc, sawEnc, tc.encode},
			} {
				wantLatency(t, c.what, c.got, c.want)
				if c.saw && c.got.Value != c.span {
					t.Errorf("%s = %v, its spans last %v", c.what, c.got.Value, c.span)
				}
				if c.got.Value > s.E2ELatency.Value {
					t.Errorf("%s = %v > e2e %v", c.what, c.got.Value, s.E2ELatency.Value)
				}
			}
		})
	}
}

// SPEC §7: queue_duration_s excludes the KV transfer — while the request is
// in flight too (Request.Progress, an HTTP layer's Server-Timing), as its
// final RequestStats will.
func TestProgressQueueExcludesTransfer(t *testing.T) {
	h := newHarness(t)
	q, err := h.tr.Arrive(t.Context(), "d", Arrival{Time: at(0), Model: "m", PDRole: PDRoleDecode})
	if err != nil {
		t.Fatal(err)
	}
	us := decodeInstance("d", "")
	h.feed(us[1:7]) // up to the first DECODING at 20
	p, ok := q.Progress(at(25))
	if !ok {
		t.Fatal("Progress: not in flight")
	}
	wantLatency(t, "queue (in flight)", p.QueueDuration, 4) // (4 - 2) + (16 - 14)
	h.feed(us[7:])
	wantLatency(t, "queue (final)", h.statsOf("d").QueueDuration, 4)
}
