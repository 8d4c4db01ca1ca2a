package reconstruct

import (
	"math"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
)

// MaxNameLength bounds the operation, model and finish reason taken from a
// span: they become metric attributes, and a span is input from outside.
const MaxNameLength = 128

// FromAttributes fills a Span from an OpenTelemetry span's name, scope,
// timestamps and attributes. It reads the gen_ai.latency.* keys (float or
// int seconds), the token counts in either spelling (the GenAI
// conventions' input/output_tokens, the engines' prompt/completion_tokens),
// the model (request or response), the operation, the first finish reason
// (a string slice, or the JSON list string vLLM and SGLang write) and
// llmtrace's llm.preemptions, llm.pd.role and llm.lora.adapter. Anything
// else is ignored.
func FromAttributes(name, scope string, start, end time.Time, attrs []attribute.KeyValue) Span {
	s := Span{Name: name, Scope: scope, Start: start, End: end, Latency: NoLatency(),
		InputTokens: -1, OutputTokens: -1, CachedTokens: -1, Preemptions: -1}
	v := new(value)
	for _, kv := range attrs {
		v.v = kv.Value
		s.Set(string(kv.Key), v)
	}
	return s
}

// Value is what Set needs of an attribute value; the Collector component
// adapts pdata values to it without copying.
type Value interface {
	Float() (float64, bool)
	Int() (int64, bool)
	Str() (string, bool)
	// FirstStr is the first element of a string slice.
	FirstStr() (string, bool)
}

type value struct{ v attribute.Value }

func (v *value) Float() (float64, bool) {
	switch v.v.Type() {
	case attribute.FLOAT64:
		return v.v.AsFloat64(), true
	case attribute.INT64:
		return float64(v.v.AsInt64()), true
	}
	return 0, false
}

func (v *value) Int() (int64, bool) {
	switch v.v.Type() {
	case attribute.INT64:
		return v.v.AsInt64(), true
	case attribute.FLOAT64:
		f := v.v.AsFloat64()
		if f >= math.MinInt64 && f <= math.MaxInt64 {
			return int64(f), true
		}
	}
	return 0, false
}

func (v *value) Str() (string, bool) {
	if v.v.Type() == attribute.STRING {
		return v.v.AsString(), true
	}
	return "", false
}

func (v *value) FirstStr() (string, bool) {
	if v.v.Type() == attribute.STRINGSLICE {
		if ss := v.v.AsStringSlice(); len(ss) > 0 {
			return ss[0], true
		}
	}
	return "", false
}

// Set records one attribute of the span; unknown keys are ignored.
func (s *Span) Set(key string, v Value) {
	switch attribute.Key(key) {
	case attributes.LatencyTimeToFirstToken:
		s.Latency.TTFT = float(v)
	case attributes.LatencyE2E:
		s.Latency.E2E = float(v)
	case attributes.LatencyTimeInQueue:
		s.Latency.Queue = float(v)
	case attributes.LatencyPrefill:
		s.Latency.Prefill = float(v)
	case attributes.LatencyDecode:
		s.Latency.Decode = float(v)
	case attributes.LatencyInference:
		s.Latency.Inference = float(v)
	case attributes.UsageInputTokens, attributes.EngineUsagePromptTokens:
		s.InputTokens = count(v)
	case attributes.UsageOutputTokens, attributes.EngineUsageCompletionTokens:
		s.OutputTokens = count(v)
	case attributes.UsageCacheReadInput, attributes.EngineUsageCachedTokens:
		s.CachedTokens = count(v)
	case attributes.Preemptions:
		s.Preemptions = count(v)
	case keyNumSequences:
		s.Sequences = count(v)
	case attributes.RequestModel:
		s.Model = name(v)
	case attributes.ResponseModel:
		if s.Model == "" {
			s.Model = name(v)
		}
	case attributes.OperationName:
		s.Operation = name(v)
	case attributes.ProviderName:
		s.Provider = name(v)
	case attributes.FinishReasons:
		if !s.ownReason {
			s.FinishReason = finishReason(v)
		}
	case attributes.FinishReason:
		if r := name(v); r != "" {
			s.FinishReason, s.ownReason = r, true
		}
	case attributes.PDRole:
		if r, _ := v.Str(); r == "prefill" || r == "decode" {
			s.PDRole = r
		}
	case attributes.LoRAAdapter:
		s.LoRAAdapter = name(v)
	}
}

// keyNumSequences is vLLM V0's count of a request's sequences (n,
// best_of), whose completion tokens it sums.
const keyNumSequences attribute.Key = "gen_ai.usage.num_sequences"

// float is a latency attribute's value. A key the span carries without a
// usable number (NaN, a string) is −Inf: present and invalid, so Compute
// drops and counts it, where NaN would pass for a key the span lacks.
func float(v Value) float64 {
	if f, ok := v.Float(); ok && !math.IsNaN(f) {
		return f
	}
	return math.Inf(-1)
}

// count is a token count: negative or absurd counts are absent.
func count(v Value) int {
	n, ok := v.Int()
	if !ok || n < 0 || n > math.MaxInt32 {
		return -1
	}
	return int(n)
}

func name(v Value) string {
	s, _ := v.Str()
	return bound(s)
}

// bound caps a name from outside at MaxNameLength bytes, cut on a rune
// boundary, with invalid UTF-8 replaced: the names become metric
// attributes, and one OTLP string that is not UTF-8 fails an exporter's
// whole batch. A valid name within the cap is kept without allocating.
func bound(s string) string {
	s, _ = textcap.Clean(s, MaxNameLength)
	return s
}

// finishReason takes the first reason of a string slice, or of the JSON
// list vLLM and SGLang write as one string (`["stop"]`), or a bare string.
func finishReason(v Value) string {
	if s, ok := v.FirstStr(); ok {
		return bound(s)
	}
	s, ok := v.Str()
	if !ok {
		return ""
	}
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		s = strings.TrimSpace(strings.TrimPrefix(s, "["))
		if i := strings.IndexAny(s, ",]"); i >= 0 {
			s = s[:i]
		}
		s = strings.Trim(strings.TrimSpace(s), `"`)
	}
	return bound(s)
}
