package reconstruct

import "strings"

// Engine says how one engine (and version) defines the gen_ai.latency.*
// keys on its request span: which instant each duration starts at. It is
// plain data, so a user can describe an engine this package does not know;
// the zero Engine is the SPEC §10 formula (vLLM V1's definitions).
type Engine struct {
	// Name identifies the mapping on the rebuilt span
	// (llm.reconstruct.engine).
	Name string
	// QueueFromArrival: time_in_queue runs from the span's start (first
	// scheduled − arrival: vLLM V0, TensorRT-LLM), not from QUEUED to
	// PREFILLING after input processing (vLLM V1).
	QueueFromArrival bool
	// PrefillFromDispatch: time_in_model_prefill runs from the request's
	// hand-off to the scheduler to the first token, the scheduler's wait
	// included (SGLang); there is then no queue instant of its own.
	PrefillFromDispatch bool
	// ZeroTTFTAbsent: a time_to_first_token of exactly 0 means no first
	// token (vLLM V1 leaves first_token_latency at 0.0).
	ZeroTTFTAbsent bool
	// NegativeAbsent: a negative duration is the engine's "unknown" (-1 in
	// TensorRT-LLM), absent without counting a contradiction.
	NegativeAbsent bool
	// NoExpand: the span already has its children (llmtrace's own roots);
	// only its Stats are used.
	NoExpand bool
}

// The engines whose tracing code this package follows (see the package
// doc for each mapping and the versions it applies to).
var (
	VLLM        = Engine{Name: "vllm", ZeroTTFTAbsent: true}
	VLLMV0      = Engine{Name: "vllm-v0", QueueFromArrival: true}
	TensorRTLLM = Engine{Name: "tensorrt-llm", QueueFromArrival: true, NegativeAbsent: true}
	SGLang      = Engine{Name: "sglang", PrefillFromDispatch: true}
	LLMTrace    = Engine{Name: "llmtrace", NoExpand: true}
)

// Scope names the engines' tracers report, as their code sets them.
const (
	scopeLLMTrace = "github.com/llmtrace/llmtrace"
	scopeSGLang   = "sglang server"
	scopeVLLM     = "vllm"
)

// EngineByName returns the known mapping called name (vllm, vllm-v0,
// tensorrt-llm, sglang, llmtrace).
func EngineByName(name string) (Engine, bool) {
	for _, e := range []Engine{VLLM, VLLMV0, TensorRTLLM, SGLang, LLMTrace} {
		if e.Name == name {
			return e, true
		}
	}
	return Engine{}, false
}

// Resolve is the mapping for s when forced (nil: none) was configured:
// llmtrace's own spans stay LLMTrace whatever is forced, since they carry
// the SPEC's meanings and already have their children (forcing an engine
// on them would expand a request twice and misread its keys); any other
// span gets forced, else Detect's choice.
func Resolve(s *Span, forced *Engine) Engine {
	if forced == nil || strings.HasPrefix(s.Scope, scopeLLMTrace) {
		return Detect(s)
	}
	return *forced
}

// Detect picks the mapping for s from what the engines' code puts on
// their spans: llmtrace's instrumentation scope; SGLang's tracer name or
// its "Req <rid>" root name; a time_in_model_prefill key (vLLM V1, and
// any engine following the SPEC); a time_in_queue without prefill (vLLM
// V0 under a vllm scope, TensorRT-LLM otherwise). A span none of these fit
// gets VLLM, the SPEC's formula.
func Detect(s *Span) Engine {
	switch {
	case strings.HasPrefix(s.Scope, scopeLLMTrace):
		return LLMTrace
	case s.Scope == scopeSGLang || strings.HasPrefix(strings.TrimSpace(s.Name), "Req ") || strings.Contains(s.Name, " Req "):
		return SGLang
	case present(s.Latency.Prefill):
		return VLLM
	case present(s.Latency.Queue) && strings.HasPrefix(s.Scope, scopeVLLM):
		return VLLMV0
	case present(s.Latency.Queue):
		return TensorRTLLM
	}
	return VLLM
}
