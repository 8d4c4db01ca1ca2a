package openaihttp

import (
	"strings"
	"testing"
)

// TestHeadText: a prompt cut short is recorded as its head: a string
// unquoted up to the last escape or rune it holds whole, anything else as
// its raw JSON up to the last whole rune.
func TestHeadText(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"abc`, "abc"},
		{`"`, ""},
		{`"a\`, "a"},
		{`"a\n`, "a\n"},
		{`"a\u00`, "a"},
		{`"a\u00e9`, "aé"},
		{`"a\ud83d`, "a"},           // the pair's second half may follow
		{`"a\ud83d\ude`, "a"},       // cut inside it
		{`"a\ud83d\ude00`, "a😀"},    // whole
		{`"a\ud83dxy`, "a\uFFFDxy"}, // a lone half, as encoding/json reads it
		{"\"a\xc3", "a"},            // é cut in two
		{"\"a\xf0\x9f\x98", "a"},    // 😀 cut in two
		{`[{"role":"user","content":"hé`, `[{"role":"user","content":"hé`},
		{"[\"h\xc3", `["h`},
		{"\"a\x01b", "\"a\x01b"}, // not a JSON string: the raw head
	} {
		if got := headText([]byte(tc.raw)); got != tc.want {
			t.Errorf("headText(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestFieldScannerKeepsHead: a key that keeps its head keeps the first
// cap bytes of a longer value, and of one the input ended inside; other
// keys keep nothing of either.
func TestFieldScannerKeepsHead(t *testing.T) {
	set := &fieldSet{keys: []string{"model", "messages"}, caps: []int{8, 16}, heads: 1 << 1}
	for _, tc := range []struct {
		body, model, head string
		cut               bool
	}{
		{`{"model":"m","messages":"short"}`, `"m"`, `"short"`, false},
		{`{"model":"m","messages":"` + strings.Repeat("x", 40) + `"}`, `"m"`, `"` + strings.Repeat("x", 15), true},
		{`{"model":"toolongmodel","messages":"abc`, "", `"abc`, true},
		{`{"messages":"abc","messages":"` + strings.Repeat("y", 40) + `"}`, "", `"` + strings.Repeat("y", 15), true},
	} {
		s := newFieldScanner(set, nil)
		s.feed([]byte(tc.body))
		model, _ := s.value(0)
		head, cut := s.head(1)
		if string(model) != tc.model || string(head) != tc.head || cut != tc.cut {
			t.Errorf("%.40q: model %q, head %q (cut %v); want %q, %q (%v)", tc.body, model, head, cut, tc.model, tc.head, tc.cut)
		}
	}
}
