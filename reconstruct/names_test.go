package reconstruct

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// The names FromAttributes keeps become metric attributes, and one OTLP
// string that is not UTF-8 fails an exporter's whole batch: a name is cut
// on a rune boundary and invalid bytes are replaced, never passed on.
func TestFromAttributesNamesStayUTF8(t *testing.T) {
	long := strings.Repeat("m", MaxNameLength-1) + "é" // 129 bytes, é split by a byte cut
	tests := []struct {
		name, in, want string
	}{
		{"cut inside a rune", long, strings.Repeat("m", MaxNameLength-1)},
		{"invalid bytes", "llama\xff\xfe-8b", "llama\uFFFD-8b"},
		{"valid and short", "llama-3-8b", "llama-3-8b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), []attribute.KeyValue{
				attributes.RequestModel.String(tt.in),
				attributes.OperationName.String(tt.in),
				attributes.LoRAAdapter.String(tt.in),
				attributes.ProviderName.String(tt.in),
				attributes.FinishReasons.StringSlice([]string{tt.in}),
			})
			for field, got := range map[string]string{
				"model": s.Model, "operation": s.Operation, "lora": s.LoRAAdapter,
				"provider": s.Provider, "finish reason": s.FinishReason,
			} {
				if !utf8.ValidString(got) || len(got) > MaxNameLength || got != tt.want {
					t.Errorf("%s = %q (%d bytes), want %q", field, got, len(got), tt.want)
				}
			}
		})
	}
}

// TestOwnFinishReasonWins: an llmtrace root of n > 1 choices lists each
// choice's reason in choice order and says the request's own (the choice
// that finished last) in llm.finish_reason; that one labels the
// request, in whichever order the attributes come, as the tracker's
// metrics label it.
func TestOwnFinishReasonWins(t *testing.T) {
	choices := attributes.FinishReasons.StringSlice([]string{"length", "stop"})
	own := attributes.FinishReason.String("stop")
	for _, attrs := range [][]attribute.KeyValue{{choices, own}, {own, choices}} {
		if s := FromAttributes("chat m", "github.com/llmtrace/llmtrace/otelstats", t0, ms(1000), attrs); s.FinishReason != "stop" {
			t.Errorf("%v: finish reason %q, want the request's stop", attrs, s.FinishReason)
		}
	}
	if s := FromAttributes("llm_request", "vllm.llm_engine", t0, ms(1000), []attribute.KeyValue{choices}); s.FinishReason != "length" {
		t.Errorf("without llm.finish_reason: %q, want the first choice's", s.FinishReason)
	}
}
