package openaihttp

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestChunkChoicesBounded: a chunk's choices are decoded into at most
// maxChunkChoices elements, whatever their number. A 1 MiB event of
// `{}` choices (the event limit) decoded into 369,322 of 48 bytes, 17 MiB
// kept for the rest of the request and some 80 MiB allocated per event,
// none of it charged to the body budget. Past the cap each choice is
// decoded into the last element in turn, so the last one stands.
func TestChunkChoicesBounded(t *testing.T) {
	last := `{"index":5,"delta":{"content":"x"},"finish_reason":"length"}`
	many := func(el string, k int) string { return strings.Repeat(el+",", k) + last }
	for _, tc := range []struct {
		name, data string
	}{
		{"scanner", `{"choices":[` + many("{}", 300000) + `]}`},
		{"nulls", `{"choices":[` + many("null", 200000) + `]}`},
		{"encoding/json", `{"ID":"x","choices":[` + many("{}", 300000) + `]}`}, // a key in capitals: Unmarshal's
		{"few", `{"choices":[` + many(`{"index":0,"delta":{"content":"y"}}`, 3) + `]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c chunkJSON
			if !c.decode([]byte(tc.data)) {
				t.Fatal("did not decode")
			}
			if cap(c.Choices) > 2*maxChunkChoices {
				t.Errorf("%d choices decoded (capacity %d), want at most %d", len(c.Choices), cap(c.Choices), maxChunkChoices)
			}
			n := len(c.Choices)
			if n == 0 || !c.Choices[n-1].FinishReason.is("length") || c.Choices[n-1].Index != 6 {
				t.Fatalf("the last choice did not stand: %d choices", n)
			}
			if tc.name == "few" && (n != 4 || c.contentChoices() != 4) {
				t.Errorf("%d choices, %d with content; want 4, 4", n, c.contentChoices())
			}
		})
	}
	// A response in one piece: its choices are decoded the same way.
	var c chunkJSON
	s := newFieldScanner(newResponseFields(16<<20), nil)
	s.feed([]byte(`{"choices":[` + many("{}", 300000) + `]}`))
	decodeResponseFields(s, &c)
	if n := len(c.Choices); cap(c.Choices) > 2*maxChunkChoices || n == 0 || !c.Choices[n-1].FinishReason.is("length") {
		t.Errorf("response: %d choices (capacity %d), the last with %q", n, cap(c.Choices), c.Choices[max(n-1, 0)].FinishReason)
	}
}

// TestCapturedOutputBounded: with content capture on, an event's choices
// and a message's tool calls are decoded into at most maxChunkChoices
// elements each, as the chunk decoder's are, the last one standing; the
// choices within the cap are captured as before.
func TestCapturedOutputBounded(t *testing.T) {
	calls := strings.Repeat("{},", 300000) + `{"index":0,"id":"call_1","function":{"name":"f","arguments":"{}"}}`
	for _, tc := range []struct {
		name, data string
	}{
		{"choices", `{"choices":[` + strings.Repeat("{},", 300000) + `{"index":1,"delta":{"content":"x"},"finish_reason":"length"}]}`},
		{"tool calls", `{"choices":[{"index":1,"delta":{"tool_calls":[` + calls + `]},"finish_reason":"length"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v outputJSON
			if err := json.Unmarshal([]byte(tc.data), &v); err != nil {
				t.Fatal(err)
			}
			n := len(v.Choices)
			if cap(v.Choices) > 2*maxChunkChoices || n == 0 {
				t.Fatalf("%d choices decoded (capacity %d), want at most %d", n, cap(v.Choices), maxChunkChoices)
			}
			last := v.Choices[n-1]
			if last.Index != 1 || last.FinishReason == nil || *last.FinishReason != "length" {
				t.Errorf("the last choice did not stand: %+v", last)
			}
			if d := last.Delta; d != nil && len(d.ToolCalls) > 0 {
				if k := len(d.ToolCalls); cap(d.ToolCalls) > 2*maxChunkChoices || d.ToolCalls[k-1].ID != "call_1" {
					t.Errorf("%d tool calls decoded (capacity %d), the last %+v", k, cap(d.ToolCalls), d.ToolCalls[k-1])
				}
			}
			var o outputCapture
			o.add([]byte(tc.data))
			if msgs := o.messages(); len(msgs) != 1 || msgs[0].FinishReason != "length" {
				t.Errorf("captured %+v, want the one choice with content", msgs)
			}
		})
	}
}
