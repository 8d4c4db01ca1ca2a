package openaihttp

import (
	"encoding/json"
	"strings"

	"github.com/llmtrace/llmtrace/internal/textcap"
)

// Opt-in content capture (SPEC §6): only when the tracker captures content
// (otelstats.WithContentCapture; otelconf reads
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT) does the layer keep
// the prompt (the request's messages, prompt or input: its first
// maxCapture bytes of JSON, cut on a UTF-8 boundary and outside an escape,
// the cut counted in llm.attributes.truncated) and assemble the completion
// from the response; the tracker redacts and caps both.

// maxCapture bounds what the layer keeps per request before the tracker's
// own cap.
const maxCapture = 64 << 10

// contentJSON is the text a chunk, an event or a whole response carries.
type contentJSON struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content *string `json:"content"`
		} `json:"delta"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Type  string          `json:"type"`
	Delta json.RawMessage `json:"delta"`
}

// appendOutput adds the text of one chunk or response to out.
func appendOutput(out *strings.Builder, data []byte) {
	if out.Len() >= maxCapture {
		return
	}
	var c contentJSON
	if json.Unmarshal(data, &c) != nil {
		return
	}
	add := func(p *string) {
		if p != nil && out.Len() < maxCapture {
			out.WriteString(textcap.Cut(*p, maxCapture-out.Len()))
		}
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		add(ch.Text)
		if ch.Delta != nil {
			add(ch.Delta.Content)
		}
		if ch.Message != nil {
			add(ch.Message.Content)
		}
	}
	if c.Type == "response.output_text.delta" {
		var s string
		if json.Unmarshal(c.Delta, &s) == nil {
			add(&s)
		}
	}
}
