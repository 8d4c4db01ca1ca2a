package reconstruct

import (
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/spans"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }

// lat builds a Latency from milliseconds; a negative argument -1 marks the
// key absent.
func lat(ttft, e2e, queue, prefill, decode float64) Latency {
	l := NoLatency()
	set := func(dst *float64, v float64) {
		if v != -1 {
			*dst = v / 1000
		}
	}
	set(&l.TTFT, ttft)
	set(&l.E2E, e2e)
	set(&l.Queue, queue)
	set(&l.Prefill, prefill)
	set(&l.Decode, decode)
	return l
}

func span(end float64, l Latency) Span {
	return Span{Name: "llm_request", Start: t0, End: ms(end), Latency: l, InputTokens: 100, OutputTokens: 11, CachedTokens: 40, Preemptions: -1}
}

func TestComputeMappings(t *testing.T) {
	z := time.Time{}
	tests := []struct {
		name    string
		engine  Engine
		span    Span
		want    Request // instants only
		clamped int
	}{
		{"vllm v1: SPEC formula", VLLM, span(1001, lat(300, 1000, 50, 200, 600)),
			Request{Arrived: t0, InputDone: ms(50), Queued: ms(50), Prefilling: ms(100), FirstToken: ms(300), LastToken: ms(900), Finished: ms(1000)}, 0},
		{"vllm v1: no e2e ends at the span's end", VLLM, span(1000, lat(300, -1, 50, 200, 600)),
			Request{Arrived: t0, InputDone: ms(50), Queued: ms(50), Prefilling: ms(100), FirstToken: ms(300), LastToken: ms(900), Finished: ms(1000)}, 0},
		{"vllm v1: abort before the first token (TTFT 0, unset engine stamps)", VLLM, span(500, lat(0, 500, 2.5e9, -3.2e9, 0)),
			Request{Arrived: t0, Finished: ms(500)}, 1},
		{"vllm v1: engine clock ahead of the frontend's puts QUEUED before ARRIVED", VLLM, span(1000, lat(100, 1000, 80, 60, 800)),
			Request{Arrived: t0, InputDone: t0, Queued: t0, Prefilling: ms(40), FirstToken: ms(100), LastToken: ms(900), Finished: ms(1000)}, 1},
		{"vllm v1: e2e beyond the span and decode beyond e2e are clamped", VLLM, span(1000, lat(300, 1200, 0, 100, 5000)),
			Request{Arrived: t0, InputDone: ms(200), Queued: ms(200), Prefilling: ms(200), FirstToken: ms(300), LastToken: ms(1000), Finished: ms(1000)}, 2},
		{"vllm v0: queue from arrival, no prefill or decode keys", VLLMV0, span(1002, lat(300, 1000, 120, -1, -1)),
			Request{Arrived: t0, Queued: t0, Prefilling: ms(120), FirstToken: ms(300), Finished: ms(1000)}, 0},
		{"tensorrt-llm: -1 means unknown, not a contradiction", TensorRTLLM, span(1000, lat(-1000, 1000, 120, -1, -1)),
			Request{Arrived: t0, Queued: t0, Prefilling: ms(120), Finished: ms(1000)}, 0},
		{"sglang: prefill from the dispatch, queue inside it", SGLang, span(1000, lat(300, 1000, -1, 250, 700)),
			Request{Arrived: t0, InputDone: ms(50), Prefilling: ms(50), FirstToken: ms(300), LastToken: ms(1000), Finished: ms(1000)}, 0},
		{"sglang: abort before the first token, inference places the dispatch", SGLang,
			func() Span { s := span(1000, lat(-1, 1000, -1, -1, -1)); s.Latency.Inference = 0.6; return s }(),
			Request{Arrived: t0, InputDone: ms(400), Prefilling: ms(400), Finished: ms(1000)}, 0},
		{"span ending before it starts", VLLM, span(-5, lat(300, 1000, 50, 200, 600)),
			Request{Arrived: t0, InputDone: t0, Queued: t0, Prefilling: t0, FirstToken: t0, LastToken: t0, Finished: t0}, 6},
		{"NaN and infinite values are dropped and counted", VLLM, span(1000, Latency{TTFT: 0.3, E2E: math.Inf(1), Queue: math.NaN(), Prefill: -math.Inf(1), Decode: math.NaN(), Inference: math.NaN()}),
			Request{Arrived: t0, FirstToken: ms(300), Finished: ms(1000)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := Compute(&tt.span, tt.engine)
			if !ok {
				t.Fatal("Compute reported nothing to rebuild")
			}
			got := [...]time.Time{r.Arrived, r.InputDone, r.Queued, r.Prefilling, r.FirstToken, r.LastToken, r.Finished}
			want := [...]time.Time{tt.want.Arrived, tt.want.InputDone, tt.want.Queued, tt.want.Prefilling, tt.want.FirstToken, tt.want.LastToken, tt.want.Finished}
			names := [...]string{"ARRIVED", "input done", "QUEUED", "PREFILLING", "first token", "last token", "FINISHED"}
			for i := range got {
				if !got[i].Equal(want[i]) {
					t.Errorf("%s = %v, want %v", names[i], off(got[i]), off(want[i]))
				}
			}
			if r.Clamped != tt.clamped {
				t.Errorf("Clamped = %d, want %d", r.Clamped, tt.clamped)
			}
			_ = z
		})
	}
}

func off(t time.Time) string {
	if t.IsZero() {
		return "absent"
	}
	return t.Sub(t0).String()
}

func TestComputeNothingToRebuild(t *testing.T) {
	for name, s := range map[string]Span{
		"no latency keys":      {Name: "GET /health", Start: t0, End: ms(3), Latency: NoLatency()},
		"only a decode key":    {Start: t0, End: ms(3), Latency: lat(-1, -1, -1, -1, 2)},
		"no start":             {End: ms(3), Latency: lat(1, 2, -1, -1, -1)},
		"zero span":            {},
		"only invalid keys":    {Start: t0, End: ms(3), Latency: lat(-5, -7, -9, -1, -1)},
		"vllm zero TTFT alone": {Start: t0, End: ms(3), Latency: lat(0, -1, -1, -1, -1)},
	} {
		if _, ok := Compute(&s, VLLM); ok {
			t.Errorf("%s: Compute reported a request", name)
		}
	}
}

func TestStats(t *testing.T) {
	s := span(1001, lat(300, 1000, 50, 200, 600))
	r, _ := Compute(&s, VLLM)
	st := r.Stats()
	want := Stats{E2E: time.Second, TTFT: 300 * time.Millisecond, Queue: 50 * time.Millisecond, Prefill: 200 * time.Millisecond,
		Decode: 700 * time.Millisecond, Inference: 900 * time.Millisecond, TPOT: 70 * time.Millisecond,
		Has: HasTTFT | HasQueue | HasPrefill | HasDecode | HasInference | HasTPOT}
	if st != want {
		t.Errorf("Stats = %+v\nwant    %+v", st, want)
	}
	// SGLang shows no queue: the queue is absent, not zero.
	s = span(1000, lat(300, 1000, -1, 250, 700))
	r, _ = Compute(&s, SGLang)
	if st := r.Stats(); st.Has&HasQueue != 0 || st.Prefill != 250*time.Millisecond {
		t.Errorf("sglang Stats = %+v, want no queue and prefill 250ms", st)
	}
	// An abort before the first token has e2e only.
	s = span(500, lat(0, 500, 2.5e9, -3.2e9, 0))
	r, _ = Compute(&s, VLLM)
	if st := r.Stats(); st.Has != 0 || st.E2E != 500*time.Millisecond {
		t.Errorf("abort Stats = %+v, want e2e alone", st)
	}
}

func TestTree(t *testing.T) {
	tests := []struct {
		name   string
		engine Engine
		span   Span
		want   []string // name start→end in ms
	}{
		{"vllm", VLLM, span(1001, lat(300, 1000, 50, 200, 600)), []string{
			"llm.input_processing 0s→50ms", "llm.queue 50ms→100ms", "llm.prefill 100ms→300ms", "llm.decode 300ms→900ms"}},
		{"vllm-v0", VLLMV0, span(1000, lat(300, 1000, 120, -1, -1)), []string{
			"llm.queue 0s→120ms", "llm.prefill 120ms→300ms", "llm.decode 300ms→1s"}},
		{"sglang", SGLang, span(1000, lat(300, 1000, -1, 250, 700)), []string{
			"llm.input_processing 0s→50ms", "llm.prefill 50ms→300ms", "llm.decode 300ms→1s"}},
		{"llmtrace roots are not expanded", LLMTrace, span(1000, lat(300, 1000, 50, 200, 600)), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := Compute(&tt.span, tt.engine)
			var tr spans.Tree
			r.Tree(&tr)
			var got []string
			for _, s := range tr.Spans[1:] {
				got = append(got, s.Name+" "+time.Duration(s.Start-t0.UnixNano()).String()+"→"+time.Duration(s.End-t0.UnixNano()).String())
				if !has(s.Attrs, attributes.Reconstructed.Bool(true)) {
					t.Errorf("%s lacks llm.reconstructed=true", s.Name)
				}
				if s.End < s.Start || s.Start < tt.span.Start.UnixNano() || s.End > tt.span.End.UnixNano() {
					t.Errorf("%s [%v, %v] is not inside the span", s.Name, s.Start, s.End)
				}
				if s.Name == attributes.SpanPrefill {
					for _, kv := range s.Attrs {
						if kv.Key == attributes.PrefillChunks {
							t.Errorf("prefill states %s, which a single span cannot show", kv.Key)
						}
					}
					if !has(s.Attrs, attributes.PrefillCachedTokens.Int(40)) {
						t.Errorf("prefill lacks the engine's cached tokens: %v", s.Attrs)
					}
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("children = %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("child %d = %q, want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func has(kvs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range kvs {
		if kv == want {
			return true
		}
	}
	return false
}

func TestFromAttributes(t *testing.T) {
	s := FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), []attribute.KeyValue{
		attributes.LatencyTimeToFirstToken.Float64(0.3),
		attributes.LatencyE2E.Int64(1),
		attributes.EngineUsagePromptTokens.Int(12),
		attributes.EngineUsageCompletionTokens.Float64(7),
		attributes.EngineUsageCachedTokens.Int(-3),
		attributes.ResponseModel.String("m"),
		attributes.FinishReasons.String(`["length", "stop"]`),
		attributes.OperationName.String(string(make([]byte, 4*MaxNameLength))),
		attribute.String("unrelated", "x"),
	})
	if s.Latency.TTFT != 0.3 || s.Latency.E2E != 1 || !math.IsNaN(s.Latency.Queue) {
		t.Errorf("latency = %+v", s.Latency)
	}
	if s.InputTokens != 12 || s.OutputTokens != 7 || s.CachedTokens != -1 || s.Preemptions != -1 {
		t.Errorf("counts = %d %d %d %d", s.InputTokens, s.OutputTokens, s.CachedTokens, s.Preemptions)
	}
	if s.Model != "m" || s.FinishReason != "length" || len(s.Operation) != MaxNameLength {
		t.Errorf("model %q reason %q operation length %d", s.Model, s.FinishReason, len(s.Operation))
	}
	for in, want := range map[attribute.Value]string{
		attribute.StringSliceValue([]string{"abort"}): "abort",
		attribute.StringValue("stop"):                 "stop",
		attribute.StringValue(`[]`):                   "",
		attribute.StringValue(`["unterminated`):       "unterminated",
		attribute.IntValue(3):                         "",
	} {
		if got := finishReason(&value{in}); got != want {
			t.Errorf("finishReason(%v) = %q, want %q", in.String(), got, want)
		}
	}
}

// A latency key whose value is NaN or not a number is there and unusable:
// dropped and counted, as a negative or infinite one is, not taken for a
// key the span lacks.
func TestFromAttributesInvalidLatency(t *testing.T) {
	for _, bad := range []attribute.KeyValue{
		attributes.LatencyTimeInQueue.Float64(math.NaN()),
		attributes.LatencyTimeInQueue.String("0.05"),
		attributes.LatencyTimeInQueue.Bool(true),
	} {
		t.Run(bad.Value.String(), func(t *testing.T) {
			s := FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), []attribute.KeyValue{
				attributes.LatencyTimeToFirstToken.Float64(0.3), attributes.LatencyE2E.Float64(1), bad,
				attributes.LatencyPrefill.Float64(0.2), attributes.LatencyDecode.Float64(0.6),
			})
			r, ok := Compute(&s, Detect(&s))
			if !ok || r.Clamped != 1 {
				t.Errorf("ok %v, Clamped %d; want true, 1", ok, r.Clamped)
			}
			if !r.Prefilling.Equal(ms(100)) || !r.FirstToken.Equal(ms(300)) {
				t.Errorf("PREFILLING %v, first token %v", off(r.Prefilling), off(r.FirstToken))
			}
		})
	}
}

func TestDetect(t *testing.T) {
	for _, tt := range []struct {
		name, scope string
		lat         Latency
		want        Engine
	}{
		{"chat m", "github.com/llmtrace/llmtrace/otelstats", lat(1, 2, 1, 1, 1), LLMTrace},
		{" Req 1a2b3c4d", "sglang server", lat(1, 2, -1, 1, 1), SGLang},
		{"prefill Req 1a2b3c4d", "other", lat(1, 2, -1, 1, 1), SGLang},
		{"llm_request", "vllm.llm_engine", lat(1, 2, 1, 1, 1), VLLM},
		{"llm_request", "vllm.llm_engine", lat(1, 2, 1, -1, -1), VLLMV0},
		{"llm_request", "trt.api_server", lat(1, 2, 1, -1, -1), TensorRTLLM},
		{"anything", "", lat(1, 2, -1, -1, -1), VLLM},
	} {
		s := Span{Name: tt.name, Scope: tt.scope, Latency: tt.lat}
		if got := Detect(&s); got != tt.want {
			t.Errorf("Detect(%q, %q) = %s, want %s", tt.name, tt.scope, got.Name, tt.want.Name)
		}
	}
	for _, e := range []Engine{VLLM, VLLMV0, TensorRTLLM, SGLang, LLMTrace} {
		if got, ok := EngineByName(e.Name); !ok || got != e {
			t.Errorf("EngineByName(%q) = %v, %v", e.Name, got, ok)
		}
	}
	if _, ok := EngineByName("nope"); ok {
		t.Error("EngineByName found an unknown engine")
	}
}

// Instants travel as Unix nanoseconds in an int64 (spans.Tree) and leave as
// OTLP's unsigned ones: a span outside 1970–2262 (a clock decades off, a
// pdata timestamp past 2262 read back wrapped into 1677–1970) cannot carry
// children. Its children came out in another century, or all collapsed
// onto the start with spurious clamps; it now passes untouched.
func TestComputeUnrepresentableTimes(t *testing.T) {
	l := lat(300, 1000, 50, 200, 600)
	y2300 := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	last := time.Unix(0, math.MaxInt64)
	for name, s := range map[string]Span{
		"after 2262":       {Start: y2300, End: y2300.Add(time.Second), Latency: l},
		"ending past 2262": {Start: last.Add(-500 * time.Millisecond), End: last.Add(500 * time.Millisecond), Latency: l},
		"before 1970":      {Start: time.Unix(-10, 0), End: time.Unix(-9, 0), Latency: l},
		"at the epoch":     {Start: time.Unix(0, 0), End: time.Unix(1, 0), Latency: l},
	} {
		if r, ok := Compute(&s, VLLM); ok {
			var tr spans.Tree
			r.Tree(&tr)
			t.Errorf("%s: Compute rebuilt the request (children %+v)", name, tr.Spans[1:])
		}
	}
	// The last representable instants still work.
	s := Span{Start: last.Add(-2 * time.Second), End: last, Latency: l}
	if _, ok := Compute(&s, VLLM); !ok {
		t.Error("a span ending at the last representable instant was not rebuilt")
	}
}

// vLLM V0 sums gen_ai.usage.completion_tokens over a request's sequences
// (n > 1, best_of) and says how many in gen_ai.usage.num_sequences: decode
// / (sum − 1) is no sequence's time per output token (a quarter of it for
// n = 4), so TPOT is absent; the token count stays the total.
func TestStatsNoTPOTForSeveralSequences(t *testing.T) {
	attrs := []attribute.KeyValue{
		attributes.LatencyTimeToFirstToken.Float64(0.3), attributes.LatencyE2E.Float64(1),
		attributes.LatencyTimeInQueue.Float64(0.1), attributes.EngineUsageCompletionTokens.Int(40),
		attribute.Int("gen_ai.usage.num_sequences", 4),
	}
	s := FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), attrs)
	r, ok := Compute(&s, Detect(&s))
	if !ok {
		t.Fatal("nothing rebuilt")
	}
	if st := r.Stats(); st.Has&HasTPOT != 0 || r.OutputTokens != 40 {
		t.Errorf("TPOT %v (has %v), output tokens %d; want no TPOT, 40 tokens", st.TPOT, st.Has&HasTPOT != 0, r.OutputTokens)
	}
	s = FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), append(attrs[:4:4], attribute.Int("gen_ai.usage.num_sequences", 1)))
	r, _ = Compute(&s, Detect(&s))
	if st := r.Stats(); st.Has&HasTPOT == 0 {
		t.Error("one sequence lost its TPOT")
	}
}

// SGLang names a disaggregated instance's root span after its role
// ("prefill Req 1a2b3c4d", "decode Req …"; a unified one " Req …") and
// sets no llm.pd.role: its P and D requests' metrics were one series
// (SPEC §7 keeps them apart by llm.pd.role), a prefill instance's
// one-token TTFT mixed with the decode instance's.
func TestComputeSGLangRoleFromName(t *testing.T) {
	for name, want := range map[string]string{
		"prefill Req 1a2b3c4d": "prefill",
		"decode Req 1a2b3c4d":  "decode",
		" Req 1a2b3c4d":        "",
		"prefill":              "",
	} {
		s := span(1000, lat(300, 1000, -1, 250, 700))
		s.Name = name
		r, _ := Compute(&s, SGLang)
		if r.PDRole != want {
			t.Errorf("%q: PDRole %q, want %q", name, r.PDRole, want)
		}
	}
	// llm.pd.role, where a span has it, stays.
	s := span(1000, lat(300, 1000, -1, 250, 700))
	s.Name, s.PDRole = "prefill Req 1a2b3c4d", "decode"
	if r, _ := Compute(&s, SGLang); r.PDRole != "decode" {
		t.Errorf("llm.pd.role overridden: %q", r.PDRole)
	}
}

// TestComputeCachedAbovePrompt: more cached than prompt tokens contradicts
// SPEC §1 (cached ≤ computed ≤ prompt): the cached count is dropped and
// counted as clamped, so the rebuilt prefill does not claim to have read
// more from the cache than the prompt holds. Within the prompt, or without
// a prompt count, it stands.
func TestComputeCachedAbovePrompt(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		input, cached        int
		wantCached, wantClmp int
	}{
		{"above the prompt", 10, 1_000_000, -1, 1},
		{"no prompt tokens, some cached", 0, 5, -1, 1},
		{"the whole prompt cached", 100, 100, 100, 0},
		{"no prompt count", -1, 40, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := span(1001, lat(300, 1000, 50, 200, 600))
			s.InputTokens, s.CachedTokens = tc.input, tc.cached
			r, ok := Compute(&s, VLLM)
			if !ok || r.CachedTokens != tc.wantCached || r.Clamped != tc.wantClmp {
				t.Fatalf("cached %d, clamped %d (ok %v); want %d, %d", r.CachedTokens, r.Clamped, ok, tc.wantCached, tc.wantClmp)
			}
			var tr spans.Tree
			r.Tree(&tr)
			for _, sp := range tr.Spans {
				for _, kv := range sp.Attrs {
					if kv.Key == attributes.PrefillCachedTokens && tc.wantCached < 0 {
						t.Errorf("%s carries %s = %v", sp.Name, kv.Key, kv.Value.String())
					}
				}
			}
		})
	}
}
