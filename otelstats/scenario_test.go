package otelstats

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/llmtrace/llmtrace/attributes"
)

// A scenario is one request fed through Tracker.Record, with its
// hand-computed RequestStats and span tree. All times are ms after base.
type scenario struct {
	name   string
	id     string
	ops    []Update
	stats  wantStats
	root   wantRoot // latency attributes are added from stats
	kids   []wantSpan
	finish func(h *harness) // optional: what ends the request (Flush, ...)
}

// Short constructors keep the tables readable.
func arrived(id string, ms float64, model, op string) Update {
	return Update{RequestID: id, Kind: KindArrived, Time: at(ms), Model: model, Operation: op}
}
func inputProcessed(id string, ms float64, prompt int) Update {
	return Update{RequestID: id, Kind: KindInputProcessed, Time: at(ms), NumPromptTokens: prompt}
}
func queued(id string, ms float64) Update {
	return Update{RequestID: id, Kind: KindQueued, Time: at(ms)}
}
func prefilling(id string, ms float64, computed, cached int) Update {
	return Update{RequestID: id, Kind: KindPrefilling, Time: at(ms), NumComputedTokens: computed, NumCachedTokens: cached}
}
func preempted(id string, ms float64) Update {
	return Update{RequestID: id, Kind: KindPreempted, Time: at(ms)}
}
func decoding(id string, ms float64, n int) Update {
	return Update{RequestID: id, Kind: KindDecoding, Time: at(ms), NumNewTokens: n}
}
func detok(id string, ms float64, n int, busy time.Duration) Update {
	return Update{RequestID: id, Kind: KindDetokenized, Time: at(ms), NumNewTokens: n, Busy: busy}
}
func feFinished(id string, ms float64, reason string) Update {
	return Update{RequestID: id, Kind: KindFinished, Side: SideFrontend, Time: at(ms), FinishReason: reason}
}
func enFinished(id string, ms float64, reason string) Update {
	return Update{RequestID: id, Kind: KindFinished, Side: SideEngine, Time: at(ms), FinishReason: reason}
}

// Span expectations.
func spInput(s, e float64, tokens int) wantSpan {
	return wantSpan{name: attributes.SpanInputProcessing, start: s, end: e,
		attrs: []attribute.KeyValue{attributes.UsageInputTokens.Int(tokens)}}
}
func spHandoff(s, e float64) wantSpan {
	return wantSpan{name: attributes.SpanHandoff, start: s, end: e}
}
func spQueue(s, e float64, reason string) wantSpan {
	return wantSpan{name: attributes.SpanQueue, start: s, end: e,
		attrs: []attribute.KeyValue{attributes.QueueReason.String(reason)}}
}
func spPrefill(s, e float64, computed, cached, chunks int, recompute bool, evs ...wantEvent) wantSpan {
	return wantSpan{name: attributes.SpanPrefill, start: s, end: e, events: evs, attrs: []attribute.KeyValue{
		attributes.PrefillComputedTokens.Int(computed),
		attributes.PrefillCachedTokens.Int(cached),
		attributes.PrefillChunks.Int(chunks),
		attributes.PrefillRecompute.Bool(recompute),
	}}
}
func evChunk(ms float64, index, computed int) wantEvent {
	return wantEvent{name: attributes.EventPrefillChunk, at: ms, attrs: []attribute.KeyValue{
		attributes.ChunkIndex.Int(index), attributes.PrefillComputedTokens.Int(computed)}}
}
func spDecode(s, e float64, tokens, segment int) wantSpan {
	return wantSpan{name: attributes.SpanDecode, start: s, end: e, attrs: []attribute.KeyValue{
		attributes.DecodeOutputTokens.Int(tokens), attributes.DecodeSegment.Int(segment)}}
}
func spDetok(s, e float64, busySeconds float64, deliveries int) wantSpan {
	w := wantSpan{name: attributes.SpanDetokenize, start: s, end: e, attrs: []attribute.KeyValue{
		attributes.DetokenizeDeliveries.Int(deliveries)}}
	if busySeconds > 0 { // else none reported: absent (TestDetokenizeBusyTimeReported)
		w.attrs = append(w.attrs, attributes.DetokenizeBusyTime.Float64(busySeconds))
	}
	return w
}

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

const us = time.Microsecond

// prePrefillRoot is the root attributes of the two "preemption during
// prefill" scenarios: one preemption of 20 ms, no prefix-cache hit.
var prePrefillRoot = []attribute.KeyValue{
	attributes.Preemptions.Int(1),
	attributes.PreemptedTime.Float64(0.020),
	attributes.UsageCacheReadInput.Int(0),
}

var scenarios = []scenario{
	{
		name: "plain request",
		id:   "plain",
		ops: []Update{
			arrived("plain", 0, "llama-3-8b", "chat"),
			{RequestID: "plain", Kind: KindInputProcessed, Time: at(2), NumPromptTokens: 12,
				Sampling: &SamplingParams{Temperature: f64(0.7), MaxTokens: i64(64)}},
			queued("plain", 3),
			prefilling("plain", 7, 12, 8),
			decoding("plain", 25, 0), // 0 means 1
			detok("plain", 26, 1, 500*us),
			decoding("plain", 35, 1),
			detok("plain", 36, 1, 500*us),
			decoding("plain", 45, 1),
			detok("plain", 46, 1, 1000*us),
			enFinished("plain", 45, "stop"),
			feFinished("plain", 48, "stop"),
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 48,
			e2e:       48,                // 48 - 0
			queue:     4,                 // PREFILLING 7 - QUEUED 3
			ttft:      26,                // first DETOKENIZED 26 - ARRIVED 0
			prefill:   19,                // 26 - 7
			decode:    22,                // FINISHED 48 - 26
			inference: 41,                // 48 - 7
			tpot:      11,                // 22 / (3 - 1)
			itl:       []float64{10, 10}, // 36-26, 46-36
			prompt:    12, cached: 8, out: 3,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 48, attrs: []attribute.KeyValue{
			attributes.UsageInputTokens.Int(12),
			attributes.UsageOutputTokens.Int(3),
			attributes.UsageCacheReadInput.Int(8),
			attributes.RequestTemperature.Float64(0.7),
			attributes.RequestMaxTokens.Int64(64),
		}, noAttrs: []attribute.Key{attributes.ErrorType, attributes.PreemptedTime, attributes.RecomputeCachedTokens, attributes.RequestTopP}},
		kids: []wantSpan{
			spInput(0, 2, 12),
			spHandoff(2, 3),
			spQueue(3, 7, "new"),
			spPrefill(7, 26, 12, 8, 1, false),
			spDecode(26, 45, 3, 0),    // first token → the engine's FINISHED
			spDetok(26, 46, 0.002, 3), // busy 0.5+0.5+1 ms
		},
	},
	{
		name: "chunked prefill",
		id:   "chunked",
		ops: []Update{
			arrived("chunked", 0, "llama-3-8b", "chat"),
			inputProcessed("chunked", 1, 300),
			queued("chunked", 2),
			prefilling("chunked", 4, 128, 64),
			prefilling("chunked", 14, 256, 64),
			prefilling("chunked", 24, 300, 64),
			decoding("chunked", 30, 1),
			detok("chunked", 31, 1, 0),
			decoding("chunked", 40, 1),
			detok("chunked", 41, 1, 0),
			enFinished("chunked", 40, "length"),
			feFinished("chunked", 42, "length"),
		},
		stats: wantStats{
			reason: "length", arrived: 0, finished: 42,
			e2e:       42,
			queue:     2,  // first PREFILLING 4 - 2; later chunks do not count
			ttft:      31, // 31 - 0
			prefill:   27, // 31 - first PREFILLING 4
			decode:    11, // 42 - 31
			inference: 38, // 42 - 4
			tpot:      11, // 11 / 1
			itl:       []float64{10},
			prompt:    300, cached: 64, out: 2,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 42},
		kids: []wantSpan{
			spInput(0, 1, 300),
			spHandoff(1, 2),
			spQueue(2, 4, "new"),
			// One prefill span for the whole run; chunks 2 and 3 are events.
			spPrefill(4, 31, 300, 64, 3, false, evChunk(14, 1, 256), evChunk(24, 2, 300)),
			spDecode(31, 40, 2, 0),
			spDetok(31, 41, 0, 2),
		},
	},
	{
		name: "recompute preemption during decode",
		id:   "pre-decode",
		ops: []Update{
			arrived("pre-decode", 0, "llama-3-8b", "chat"),
			inputProcessed("pre-decode", 1, 10),
			queued("pre-decode", 2),
			prefilling("pre-decode", 5, 10, 4),
			decoding("pre-decode", 20, 1),
			detok("pre-decode", 21, 1, 0),
			decoding("pre-decode", 30, 1),
			detok("pre-decode", 31, 1, 0),
			preempted("pre-decode", 35),
			// Recompute: prompt 10 + 2 generated = 12 tokens, 2 from cache.
			prefilling("pre-decode", 50, 12, 2),
			decoding("pre-decode", 60, 1),
			detok("pre-decode", 61, 1, 0),
			decoding("pre-decode", 70, 1),
			detok("pre-decode", 71, 1, 0),
			enFinished("pre-decode", 70, "stop"),
			feFinished("pre-decode", 72, "stop"),
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 72,
			e2e:       72,
			queue:     3,  // 5 - 2; the wait after the preemption is not in it
			ttft:      21, // preemption never resets the first token
			prefill:   16, // 21 - 5
			decode:    51, // 72 - 21, preemption gap and recompute included
			inference: 67, // 72 - 5
			tpot:      17, // 51 / (4 - 1)
			itl:       []float64{10, 30, 10},
			preempted: 15, // next PREFILLING 50 - PREEMPTED 35
			prompt:    10, cached: 4, out: 4, preemptions: 1,
			recomputeCached: 2, // not a prefix-cache hit of the request
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 72, attrs: []attribute.KeyValue{
			attributes.Preemptions.Int(1),
			attributes.PreemptedTime.Float64(0.015),
			attributes.RecomputeCachedTokens.Int(2),
			attributes.UsageCacheReadInput.Int(4),
		}},
		kids: []wantSpan{
			spInput(0, 1, 10),
			spHandoff(1, 2),
			spQueue(2, 5, "new"),
			spPrefill(5, 21, 10, 4, 1, false),
			spDecode(21, 35, 2, 0),
			spQueue(35, 50, "preempted"),
			spPrefill(50, 61, 12, 2, 1, true),
			spDecode(61, 70, 2, 1),
			spDetok(21, 71, 0, 4),
		},
	},
	{
		// vLLM can preempt and resume a request within a step or two,
		// faster than its frontend detokenizes: the first token reaches
		// the client while the recompute already runs. TTFT is still the
		// end of the first llm.prefill (SPEC §3), and the decode segments
		// count each token once.
		name: "first token delivered after the resume",
		id:   "pre-late",
		ops: []Update{
			arrived("pre-late", 0, "llama-3-8b", "chat"),
			queued("pre-late", 1),
			prefilling("pre-late", 2, 10, 0),
			decoding("pre-late", 5, 1),
			preempted("pre-late", 6),
			prefilling("pre-late", 7, 11, 0),
			detok("pre-late", 8, 1, 0), // the token of the first run
			decoding("pre-late", 9, 1),
			detok("pre-late", 10, 1, 0),
			decoding("pre-late", 11, 1),
			enFinished("pre-late", 11, "stop"),
			detok("pre-late", 12, 1, 0),
			feFinished("pre-late", 13, "stop"),
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 13,
			e2e: 13, queue: 1, ttft: 8, prefill: 6, decode: 5, inference: 11, tpot: 2.5,
			itl: []float64{2, 2}, preempted: 1, prompt: -1, cached: 0, out: 3, preemptions: 1,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 13, attrs: []attribute.KeyValue{
			attributes.Preemptions.Int(1),
		}},
		kids: []wantSpan{
			spQueue(1, 2, "new"),
			spPrefill(2, 8, 10, 0, 1, false), // to the first token, as TTFT
			spDecode(8, 8, 1, 0),
			spQueue(6, 7, "preempted"),
			spPrefill(7, 10, 11, 0, 1, true), // to its own first token's delivery
			spDecode(10, 11, 2, 1),
			spDetok(8, 12, 0, 3),
		},
	},
	{
		name: "preemption during prefill",
		id:   "pre-prefill",
		ops: []Update{
			arrived("pre-prefill", 0, "llama-3-8b", "chat"),
			inputProcessed("pre-prefill", 1, 100),
			queued("pre-prefill", 2),
			prefilling("pre-prefill", 4, 50, 0),
			preempted("pre-prefill", 10), // before any token
			prefilling("pre-prefill", 30, 64, 32),
			prefilling("pre-prefill", 40, 100, 32),
			decoding("pre-prefill", 50, 1),
			decoding("pre-prefill", 60, 1),
			decoding("pre-prefill", 70, 1),
			enFinished("pre-prefill", 70, "stop"),
			feFinished("pre-prefill", 75, "stop"),
		},
		// No DETOKENIZED: the engine's DECODING times stand in.
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 75,
			e2e:       75,
			queue:     2,    // 4 - 2
			ttft:      50,   // first DECODING 50 - 0
			prefill:   46,   // 50 - first PREFILLING 4
			decode:    25,   // 75 - 50
			inference: 71,   // 75 - 4
			tpot:      12.5, // 25 / 2
			itl:       []float64{10, 10},
			preempted: 20, // 30 - 10
			prompt:    100, cached: 0, out: 3, preemptions: 1,
			recomputeCached: 32,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 75, attrs: prePrefillRoot},
		kids: []wantSpan{
			spInput(0, 1, 100),
			spHandoff(1, 2),
			spQueue(2, 4, "new"),
			spPrefill(4, 10, 50, 0, 1, false), // cut by the preemption, no decode
			spQueue(10, 30, "preempted"),
			spPrefill(30, 50, 100, 32, 2, true, evChunk(40, 1, 100)),
			spDecode(50, 70, 3, 0), // the first decode segment is 0
		},
	},
	{
		// The same with the frontend delivering: the first delivery is
		// the second run's first token, not a token of the preempted run.
		name: "preemption during prefill, frontend delivers",
		id:   "pre-prefill-fe",
		ops: []Update{
			arrived("pre-prefill-fe", 0, "llama-3-8b", "chat"),
			inputProcessed("pre-prefill-fe", 1, 100),
			queued("pre-prefill-fe", 2),
			prefilling("pre-prefill-fe", 4, 50, 0),
			preempted("pre-prefill-fe", 10), // before any token
			prefilling("pre-prefill-fe", 30, 100, 32),
			decoding("pre-prefill-fe", 50, 1),
			detok("pre-prefill-fe", 52, 1, 0),
			decoding("pre-prefill-fe", 60, 1),
			detok("pre-prefill-fe", 62, 1, 0),
			enFinished("pre-prefill-fe", 70, "stop"),
			feFinished("pre-prefill-fe", 75, "stop"),
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 75,
			e2e:       75,
			queue:     2,  // 4 - 2
			ttft:      52, // first delivery 52 - 0
			prefill:   48, // 52 - first PREFILLING 4
			decode:    23, // 75 - 52
			inference: 71, // 75 - 4
			tpot:      23, // 23 / 1
			itl:       []float64{10},
			preempted: 20, // 30 - 10
			prompt:    100, cached: 0, out: 2, preemptions: 1,
			recomputeCached: 32,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 75, attrs: prePrefillRoot},
		kids: []wantSpan{
			spInput(0, 1, 100),
			spHandoff(1, 2),
			spQueue(2, 4, "new"),
			spPrefill(4, 10, 50, 0, 1, false), // cut by the preemption, no decode
			spQueue(10, 30, "preempted"),
			spPrefill(30, 52, 100, 32, 1, true),
			spDecode(52, 70, 2, 0), // the first decode segment is 0
			spDetok(52, 62, 0, 2),
		},
	},
	{
		name: "two preemptions, engine only",
		id:   "two-pre",
		ops: []Update{
			// The frontend reports only ARRIVED (an engine call), so the
			// engine's FINISHED ends the request at once.
			arrived("two-pre", 0, "m", "text_completion"),
			queued("two-pre", 1),
			prefilling("two-pre", 2, 8, 0),
			decoding("two-pre", 10, 1),
			decoding("two-pre", 20, 1),
			preempted("two-pre", 25),
			prefilling("two-pre", 40, 10, 0),
			decoding("two-pre", 50, 1),
			preempted("two-pre", 55),
			prefilling("two-pre", 70, 11, 0),
			decoding("two-pre", 80, 1),
			decoding("two-pre", 90, 1),
			{RequestID: "two-pre", Kind: KindFinished, Side: SideEngine, Time: at(95), FinishReason: "stop", NumPromptTokens: 8},
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 95,
			e2e:       95,
			queue:     1,     // 2 - 1
			ttft:      10,    // 10 - 0
			prefill:   8,     // 10 - 2
			decode:    85,    // 95 - 10
			inference: 93,    // 95 - 2
			tpot:      21.25, // 85 / (5 - 1)
			itl:       []float64{10, 30, 30, 10},
			preempted: 30, // (40 - 25) + (70 - 55)
			prompt:    8,  // from FINISHED, as INPUT_PROCESSED gave none
			cached:    0, out: 5, preemptions: 2,
		},
		root: wantRoot{name: "text_completion m", start: 0, end: 95, attrs: []attribute.KeyValue{
			attributes.OperationName.String("text_completion"),
			attributes.Preemptions.Int(2),
			attributes.PreemptedTime.Float64(0.030),
			attributes.UsageInputTokens.Int(8),
		}},
		kids: []wantSpan{
			spQueue(1, 2, "new"),
			spPrefill(2, 10, 8, 0, 1, false),
			spDecode(10, 25, 2, 0),
			spQueue(25, 40, "preempted"),
			spPrefill(40, 50, 10, 0, 1, true),
			spDecode(50, 55, 1, 1),
			spQueue(55, 70, "preempted"),
			spPrefill(70, 80, 11, 0, 1, true),
			spDecode(80, 95, 2, 2),
		},
	},
	{
		name: "preempted, aborted while waiting: preempted until FINISHED",
		id:   "pre-abort",
		ops: []Update{
			arrived("pre-abort", 0, "llama-3-8b", "chat"),
			inputProcessed("pre-abort", 1, 4),
			queued("pre-abort", 2),
			prefilling("pre-abort", 3, 4, 0),
			decoding("pre-abort", 10, 1),
			detok("pre-abort", 11, 1, 0),
			preempted("pre-abort", 15),
			enFinished("pre-abort", 40, "abort"),
			feFinished("pre-abort", 42, "abort"),
		},
		stats: wantStats{
			reason: "abort", errType: "abort", arrived: 0, finished: 42,
			e2e: 42, queue: 1, ttft: 11, prefill: 8,
			decode:    31, // 42 - 11
			inference: 39, // 42 - 3
			tpot:      absent,
			preempted: 25, // the engine's FINISHED 40 - PREEMPTED 15
			prompt:    4, cached: 0, out: 1, preemptions: 1,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 42, status: codes.Error, statusDesc: "abort",
			attrs: []attribute.KeyValue{attributes.PreemptedTime.Float64(0.025), attributes.Preemptions.Int(1)}},
		kids: []wantSpan{
			spInput(0, 1, 4),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 4, 0, 1, false),
			spDecode(11, 15, 1, 0),
			spQueue(15, 40, "preempted"), // the wait ends at the engine's FINISHED
			spDetok(11, 11, 0, 1),
		},
	},
	{
		name: "abort before scheduling",
		id:   "abort-queued",
		ops: []Update{
			arrived("abort-queued", 0, "llama-3-8b", "chat"),
			inputProcessed("abort-queued", 1, 5),
			queued("abort-queued", 2),
			enFinished("abort-queued", 9, "abort"),
			feFinished("abort-queued", 10, "abort"),
		},
		stats: wantStats{
			reason: "abort", errType: "abort", arrived: 0, finished: 10,
			e2e:   10,
			queue: absent, ttft: absent, prefill: absent, decode: absent, inference: absent, tpot: absent,
			prompt: 5, cached: absent,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 10, status: codes.Error, statusDesc: "abort",
			attrs: []attribute.KeyValue{
				attributes.ErrorType.String("abort"),
				attributes.FinishReasons.StringSlice([]string{"abort"}),
				attributes.UsageOutputTokens.Int(0),
			},
			noAttrs: []attribute.Key{attributes.UsageCacheReadInput}},
		kids: []wantSpan{
			spInput(0, 1, 5),
			spHandoff(1, 2),
			spQueue(2, 9, "new"), // waits until the engine's FINISHED
		},
	},
	{
		name: "abort before the first token",
		id:   "abort-prefill",
		ops: []Update{
			arrived("abort-prefill", 0, "llama-3-8b", "chat"),
			inputProcessed("abort-prefill", 1, 5),
			queued("abort-prefill", 2),
			prefilling("abort-prefill", 3, 5, 0),
			enFinished("abort-prefill", 8, "abort"),
			feFinished("abort-prefill", 10, "abort"),
		},
		stats: wantStats{
			reason: "abort", errType: "abort", arrived: 0, finished: 10,
			e2e:   10,
			queue: 1, // 3 - 2
			ttft:  absent, prefill: absent, decode: absent, tpot: absent,
			inference: 7, // 10 - 3
			prompt:    5, cached: 0,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 10, status: codes.Error, statusDesc: "abort",
			attrs: []attribute.KeyValue{attributes.ErrorType.String("abort")}},
		kids: []wantSpan{
			spInput(0, 1, 5),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 8, 5, 0, 1, false), // no token: ends at the engine's FINISHED
		},
	},
	{
		name: "abort mid-decode",
		id:   "abort-decode",
		ops: []Update{
			arrived("abort-decode", 0, "llama-3-8b", "chat"),
			inputProcessed("abort-decode", 1, 5),
			queued("abort-decode", 2),
			prefilling("abort-decode", 3, 5, 0),
			decoding("abort-decode", 10, 1),
			detok("abort-decode", 11, 1, 0),
			decoding("abort-decode", 20, 1),
			detok("abort-decode", 21, 1, 0),
			enFinished("abort-decode", 24, "abort"),
			feFinished("abort-decode", 25, "abort"),
		},
		stats: wantStats{
			reason: "abort", errType: "abort", arrived: 0, finished: 25,
			e2e:       25,
			queue:     1,
			ttft:      11, // 11 - 0
			prefill:   8,  // 11 - 3
			decode:    14, // 25 - 11
			inference: 22, // 25 - 3
			tpot:      14, // 14 / 1
			itl:       []float64{10},
			prompt:    5, cached: 0, out: 2,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 25, status: codes.Error, statusDesc: "abort",
			attrs: []attribute.KeyValue{attributes.ErrorType.String("abort")}},
		kids: []wantSpan{
			spInput(0, 1, 5),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 5, 0, 1, false),
			spDecode(11, 24, 2, 0),
			spDetok(11, 21, 0, 2),
		},
	},
	{
		name: "speculative decoding, frontend deliveries",
		id:   "spec-fe",
		ops: []Update{
			arrived("spec-fe", 0, "llama-3-8b", "chat"),
			inputProcessed("spec-fe", 1, 20),
			queued("spec-fe", 2),
			prefilling("spec-fe", 3, 20, 0),
			decoding("spec-fe", 10, 1),
			detok("spec-fe", 11, 1, 0),
			decoding("spec-fe", 20, 3),
			detok("spec-fe", 21, 3, 0),
			detok("spec-fe", 25, 0, 0), // a delivery without tokens: no ITL gap
			decoding("spec-fe", 30, 2),
			detok("spec-fe", 31, 2, 0),
			enFinished("spec-fe", 30, "stop"),
			feFinished("spec-fe", 32, "stop"),
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 32,
			e2e:       32,
			queue:     1,
			ttft:      11,
			prefill:   8,                 // 11 - 3
			decode:    21,                // 32 - 11
			inference: 29,                // 32 - 3
			tpot:      4.2,               // 21 / (6 - 1): by token count
			itl:       []float64{10, 10}, // one gap per delivery: 21-11, 31-21
			prompt:    20, cached: 0, out: 6,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 32, attrs: []attribute.KeyValue{attributes.UsageOutputTokens.Int(6)}},
		kids: []wantSpan{
			spInput(0, 1, 20),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 20, 0, 1, false),
			spDecode(11, 30, 6, 0),
			spDetok(11, 31, 0, 4),
		},
	},
	{
		name: "speculative decoding, engine only",
		id:   "spec-en",
		ops: []Update{
			arrived("spec-en", 0, "m", ""), // operation defaults to chat
			queued("spec-en", 1),
			prefilling("spec-en", 2, 7, 0),
			decoding("spec-en", 10, 3),
			decoding("spec-en", 20, 3),
			decoding("spec-en", 30, 2),
			enFinished("spec-en", 38, "length"),
		},
		stats: wantStats{
			reason: "length", arrived: 0, finished: 38,
			e2e:       38,
			queue:     1,
			ttft:      10,
			prefill:   8,  // 10 - 2
			decode:    28, // 38 - 10
			inference: 36, // 38 - 2
			tpot:      4,  // 28 / (8 - 1)
			itl:       []float64{10, 10},
			prompt:    absent, cached: 0, out: 8,
		},
		root: wantRoot{name: "chat m", start: 0, end: 38, attrs: []attribute.KeyValue{
			attributes.OperationName.String("chat"), attributes.UsageOutputTokens.Int(8)},
			noAttrs: []attribute.Key{attributes.UsageInputTokens}},
		kids: []wantSpan{
			spQueue(1, 2, "new"),
			spPrefill(2, 10, 7, 0, 1, false),
			spDecode(10, 38, 8, 0),
		},
	},
	{
		name: "both sides FINISHED, frontend's reason and time win",
		id:   "both",
		ops: []Update{
			arrived("both", 0, "llama-3-8b", "chat"),
			inputProcessed("both", 1, 3),
			queued("both", 2),
			prefilling("both", 3, 3, 0),
			decoding("both", 10, 1),
			detok("both", 11, 1, 0),
			enFinished("both", 30, "stop"),
			// The client went away before the end reached it.
			feFinished("both", 35, "abort"),
		},
		stats: wantStats{
			reason: "abort", errType: "abort", arrived: 0, finished: 35,
			e2e: 35, queue: 1, ttft: 11, prefill: 8,
			decode:    24, // 35 - 11
			inference: 32, // 35 - 3
			tpot:      absent, itl: nil, prompt: 3, cached: 0, out: 1,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 35, status: codes.Error, statusDesc: "abort"},
		kids: []wantSpan{
			spInput(0, 1, 3),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 3, 0, 1, false),
			spDecode(11, 30, 1, 0), // the last decode ends at the engine's FINISHED
			spDetok(11, 11, 0, 1),
		},
	},
	{
		name: "only the engine FINISHED, frontend reporting: Flush ends the wait",
		id:   "grace",
		ops: []Update{
			arrived("grace", 0, "llama-3-8b", "chat"),
			inputProcessed("grace", 1, 4),
			queued("grace", 2),
			prefilling("grace", 3, 4, 0),
			decoding("grace", 10, 1),
			detok("grace", 11, 1, 0),
			decoding("grace", 20, 1),
			detok("grace", 21, 1, 0),
			enFinished("grace", 22, "stop"),
		},
		finish: func(h *harness) {
			if len(h.stats) != 0 {
				h.t.Fatalf("finished before the frontend's grace period")
			}
			h.tr.Flush()
		},
		stats: wantStats{
			reason: "stop", arrived: 0, finished: 22, // the engine's FINISHED ends it
			e2e: 22, queue: 1, ttft: 11, prefill: 8,
			decode:    11, // 22 - 11
			inference: 19, // 22 - 3
			tpot:      11,
			itl:       []float64{10},
			prompt:    4, cached: 0, out: 2,
		},
		root: wantRoot{name: "chat llama-3-8b", start: 0, end: 22},
		kids: []wantSpan{
			spInput(0, 1, 4),
			spHandoff(1, 2),
			spQueue(2, 3, "new"),
			spPrefill(3, 11, 4, 0, 1, false),
			spDecode(11, 22, 2, 0),
			spDetok(11, 21, 0, 2),
		},
	},
}

// rootLatencyAttrs are the gen_ai.latency.* (and TPOT) attributes the root
// must carry for w: present values in seconds, absent values absent.
func rootLatencyAttrs(w wantStats) (have []attribute.KeyValue, not []attribute.Key) {
	add := func(k attribute.Key, msv float64) {
		if msv < 0 {
			not = append(not, k)
			return
		}
		have = append(have, k.Float64(msv/1e3))
	}
	add(attributes.LatencyTimeToFirstToken, w.ttft)
	add(attributes.LatencyE2E, w.e2e)
	add(attributes.LatencyTimeInQueue, w.queue)
	add(attributes.LatencyPrefill, w.prefill)
	add(attributes.LatencyDecode, w.decode)
	add(attributes.LatencyInference, w.inference)
	add(attributes.TimePerOutputToken, w.tpot)
	have = append(have,
		attributes.FinishReasons.StringSlice([]string{w.reason}),
		attributes.Preemptions.Int(w.preemptions),
		attributes.UsageOutputTokens.Int(w.out),
	)
	if w.errType != "" {
		have = append(have, attributes.ErrorType.String(w.errType))
	} else {
		not = append(not, attributes.ErrorType)
	}
	return have, not
}

func (sc *scenario) run(h *harness) {
	h.t.Helper()
	h.feed(sc.ops)
	if sc.finish != nil {
		sc.finish(h)
	}
}

func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { checkScenario(t, sc) })
	}
}

// checkScenario runs sc on a tracker of its own and checks its stats, its
// span tree and its metrics.
func checkScenario(t *testing.T, sc scenario) {
	t.Helper()
	h := newHarness(t)
	sc.run(h)
	if n := h.rejects(""); n != 0 {
		t.Fatalf("%d updates rejected", n)
	}
	if n := h.tr.InFlight(); n != 0 {
		t.Fatalf("InFlight = %d after the scenario", n)
	}
	s := h.statsOf(sc.id)
	checkStats(t, s, sc.stats)
	if s.ClampedSpans != 0 {
		t.Errorf("ClampedSpans = %d, want 0", s.ClampedSpans)
	}

	root := sc.root
	have, not := rootLatencyAttrs(sc.stats)
	root.attrs = append(append([]attribute.KeyValue{
		attributes.RequestID.String(sc.id),
		attributes.RequestModel.String(sc.ops[0].Model),
	}, root.attrs...), have...)
	root.noAttrs = append(root.noAttrs, not...)
	h.checkTree(s, root, sc.kids)
	if n := len(h.rec.Ended()); n != len(sc.kids)+1 {
		t.Errorf("%d spans recorded, want %d", n, len(sc.kids)+1)
	}

	checkScenarioMetrics(h, sc.stats)
}

// checkScenarioMetrics checks SPEC §4's metrics for a tracker that finished
// exactly one request with stats w.
func checkScenarioMetrics(h *harness, w wantStats) {
	h.t.Helper()
	hist := func(name string, msv float64, match ...attribute.KeyValue) {
		h.t.Helper()
		if msv < 0 {
			h.wantHist(name, 0, 0)
			return
		}
		h.wantHist(name, 1, msv, match...)
	}
	var dur []attribute.KeyValue
	if w.errType != "" {
		dur = append(dur, attributes.ErrorType.String(w.errType))
	}
	hist(attributes.MetricRequestDuration, w.e2e, dur...)
	hist(attributes.MetricTimeToFirstToken, w.ttft)
	hist(attributes.MetricTimePerOutputToken, w.tpot)
	hist(attributes.MetricQueueDuration, w.queue)
	hist(attributes.MetricPrefillDuration, w.prefill)
	hist(attributes.MetricDecodeDuration, w.decode)
	hist(attributes.MetricInferenceDuration, w.inference)
	var itlSum float64
	for _, g := range w.itl {
		itlSum += g
	}
	h.wantHist(attributes.MetricInterTokenLatency, uint64(len(w.itl)), itlSum)

	h.wantCounter(attributes.MetricRequests, 1, attributes.FinishReason.String(w.reason))
	h.wantCounter(attributes.MetricRequests, 1)
	h.wantCounter(attributes.MetricPreemptions, int64(w.preemptions))
	h.wantCounter(attributes.MetricGenerationTokens, int64(w.out))
	prompt := max(w.prompt, 0)
	h.wantCounter(attributes.MetricPromptTokens, int64(prompt))
	// Prefix-cache queries and hits: the prompt and its cached tokens, for
	// requests scheduled with a known prompt.
	var q, hits int64
	if w.prompt >= 0 && w.cached >= 0 {
		q, hits = int64(w.prompt), int64(w.cached)
	}
	h.wantCounter(attributes.MetricPrefixCacheQuery, q)
	h.wantCounter(attributes.MetricPrefixCacheHits, hits)
	// Metric attributes are low-cardinality: never a request id.
	for name, d := range h.metrics() {
		for _, set := range attrSetsOf(d) {
			if _, ok := set.Value(attributes.RequestID); ok {
				h.t.Errorf("%s carries gen_ai.request.id", name)
			}
		}
	}
}
