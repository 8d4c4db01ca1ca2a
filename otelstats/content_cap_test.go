package otelstats

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// TestContentCapHolds: captured content on the root span is never longer
// than ContentCapture.MaxBytes (SPEC §6: opted-in content comes with a
// size cap), also when the cap leaves no room for the truncation mark, and
// is the text's head cut on a rune boundary.
func TestContentCapHolds(t *testing.T) {
	in := strings.Repeat("é", 40) // 80 bytes, 2-byte runes
	out := strings.Repeat("x", 80)
	for _, max := range []int{1, 3, 8, 13, 14, 15, 40, 80, 100} {
		h := newHarness(t, WithContentCapture(&ContentCapture{MaxBytes: max}))
		q, err := h.tr.Arrive(context.Background(), "c", Arrival{Time: at(0), Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		q.RecordContent(in, out)
		mustOK(t, q.Finish(at(5), "stop"))
		root, _ := h.treeOf(h.statsOf("c"))
		for key, text := range map[string]string{string(attributes.InputMessages): in, string(attributes.OutputMessages): out} {
			got := sattr(root.Attributes(), attribute.Key(key))
			head := strings.TrimSuffix(got, "…[truncated]")
			switch {
			case len(got) > max:
				t.Errorf("MaxBytes %d: %s is %d bytes: %q", max, key, len(got), got)
			case !utf8.ValidString(got) || !strings.HasPrefix(text, head):
				t.Errorf("MaxBytes %d: %s = %q, not the text's head", max, key, got)
			case len(text) <= max && got != text:
				t.Errorf("MaxBytes %d: %s = %q, want the whole text", max, key, got)
			}
		}
	}
}
