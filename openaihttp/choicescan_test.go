package openaihttp

import (
	"encoding/json"
	"testing"
)

// lastFinishReason is what observe takes from choices decoded whole: the
// last finish reason that is a non-empty string.
func lastFinishReason(raw []byte) (string, bool) {
	var c chunkJSON
	c.reset()
	if json.Unmarshal(raw, &c.Choices) != nil {
		return "", false
	}
	last := ""
	for _, ch := range c.Choices {
		if len(ch.FinishReason) > 2 {
			last, _ = ch.FinishReason.text(1 << 10)
		}
	}
	return last, true
}

// scanReason feeds choices to a choiceScan in pieces of n bytes.
func scanReason(raw []byte, n int) string {
	cs := newChoiceScan(&hold{})
	defer cs.release()
	for i := 0; i < len(raw); i += n {
		cs.feed(raw[i:min(i+n, len(raw))])
	}
	s, _ := rawText(cs.reason()).text(1 << 10)
	return s
}

var choiceScanSeeds = []string{
	`[{"index":0,"message":{"role":"assistant","content":"hi \"there\" {[","finish_reason":"x"},"finish_reason":"length"}]`,
	`[{"index":0,"text":"a","finish_reason":"stop"},{"index":1,"text":"b","finish_reason":null},{"index":2,"finish_reason":"content_filter","logprobs":{"content":[{"token":"}"}]}}]`,
	` [ { "FINISH_REASON" : "tool_calls" } , {"finish_reason":"a","finish_reason":"b"} ] `,
	`[{"finish_reason":"stop"},{"finish_reason":""},{"finish_reason":7}]`,
	`[{"finish_reason":"caf\u00e9"}]`, `[]`, `null`, `{}`,
}

// TestChoiceScan: the finish reason read as the choices go by, in pieces
// of any size, is the one their whole decoding gives.
func TestChoiceScan(t *testing.T) {
	for _, s := range choiceScanSeeds {
		want, ok := lastFinishReason([]byte(s))
		if !ok {
			continue
		}
		for n := 1; n <= len(s); n++ {
			if got := scanReason([]byte(s), n); got != want {
				t.Fatalf("%s in pieces of %d: %q, want %q", s, n, got, want)
			}
		}
	}
}

func FuzzChoiceScan(f *testing.F) {
	for _, s := range choiceScanSeeds {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		want, ok := lastFinishReason([]byte(s))
		if !ok || n <= 0 {
			return
		}
		if got := scanReason([]byte(s), n); got != want {
			t.Fatalf("%q in pieces of %d: %q, want %q", s, n, got, want)
		}
	})
}
