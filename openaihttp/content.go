package openaihttp

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/llmtrace/llmtrace/internal/textcap"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Opt-in content capture (SPEC §6): only when the tracker captures content
// (otelstats.WithContentCapture; otelconf reads
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT) does the layer read
// the request's messages, prompt or input (their first maxCapture bytes of
// JSON; a cut counted in llm.attributes.truncated) and assemble the
// response's messages, one per choice, as the GenAI conventions' messages;
// the tracker redacts, caps and writes them.

// maxCapture bounds what the layer keeps per request before the tracker's
// own cap: the request's JSON read, and the response's texts.
const maxCapture = 64 << 10

// maxToolCalls bounds the tool calls kept per choice.
const maxToolCalls = 64

// outputCapture assembles a response's messages from its chunks (or from
// the whole response). The zero value is empty.
type outputCapture struct {
	choices []choiceOut
	size    int // bytes kept, at most maxCapture
}

type choiceOut struct {
	index           int
	role            string
	reasoning, text strings.Builder
	calls           []callOut
	finish          string
}

type callOut struct {
	index    int
	id, name string
	args     strings.Builder
}

// outputJSON is what a chunk, an event or a whole response's choices carry.
// Its arrays are capped, as the chunk decoder's are: captured or not, a
// hostile upstream's event of `{}` elements is not decoded into hundreds
// of thousands of structs.
type outputJSON struct {
	Choices capped[outputChoiceJSON] `json:"choices"`
	Type    string                   `json:"type"`
	Delta   json.RawMessage          `json:"delta"`
}

type outputChoiceJSON struct {
	Index        int          `json:"index"`
	Text         *string      `json:"text"`
	FinishReason *string      `json:"finish_reason"`
	Delta        *messageJSON `json:"delta"`
	Message      *messageJSON `json:"message"`
}

type messageJSON struct {
	Role             string               `json:"role"`
	Content          json.RawMessage      `json:"content"`
	ReasoningContent *string              `json:"reasoning_content"` // vLLM, DeepSeek
	Reasoning        *string              `json:"reasoning"`         // vLLM's newer name
	ToolCalls        capped[toolCallJSON] `json:"tool_calls"`
}

// add reads one chunk, event or response.
func (o *outputCapture) add(data []byte) {
	if o.size >= maxCapture {
		return
	}
	var v outputJSON
	if json.Unmarshal(data, &v) != nil {
		return
	}
	for i := range v.Choices {
		c := &v.Choices[i]
		ch := o.choice(c.Index)
		if ch == nil {
			continue
		}
		if c.FinishReason != nil {
			ch.finish = orKeep(ch.finish, *c.FinishReason)
		}
		if c.Text != nil {
			o.write(&ch.text, *c.Text)
		}
		if c.Delta != nil {
			o.addMessage(ch, c.Delta, true)
		}
		if c.Message != nil {
			o.addMessage(ch, c.Message, false)
		}
	}
	o.addEvent(v.Type, v.Delta)
}

// addItems reads a whole Responses API response's output items: its
// message's text, its reasoning and its function calls, as one choice.
func (o *outputCapture) addItems(raw []byte) {
	ch := o.choice(0)
	if ch == nil {
		return
	}
	eachElement(raw, func(el json.RawMessage) {
		var it itemJSON
		if json.Unmarshal(el, &it) != nil {
			return
		}
		m := it.message()
		for _, p := range m.Parts {
			switch p.Type {
			case otelstats.PartText:
				o.write(&ch.text, p.Content)
			case otelstats.PartReasoning:
				o.write(&ch.reasoning, p.Content)
			case otelstats.PartToolCall:
				if call := ch.call(len(ch.calls)); call != nil {
					call.id, call.name = orKeep("", p.ID), orKeep("", p.Name)
					o.write(&call.args, p.Arguments)
				}
			}
		}
	})
}

// addEvent reads a Responses API event's text.
func (o *outputCapture) addEvent(typ string, delta json.RawMessage) {
	reasoning := typ == "response.reasoning_text.delta" || typ == "response.reasoning_summary_text.delta"
	if typ != "response.output_text.delta" && !reasoning {
		return
	}
	s, ok := stringOf(delta)
	ch := o.choice(0)
	if !ok || ch == nil {
		return
	}
	b := &ch.text
	if reasoning {
		b = &ch.reasoning
	}
	o.write(b, s)
}

// addMessage reads a choice's message, or a stream's delta of it, whose
// tool calls carry their index (a whole message's calls are in order).
func (o *outputCapture) addMessage(ch *choiceOut, d *messageJSON, delta bool) {
	ch.role = orKeep(ch.role, d.Role)
	if s, ok := stringOf(d.Content); ok {
		o.write(&ch.text, s)
	}
	for _, r := range []*string{d.ReasoningContent, d.Reasoning} {
		if r != nil {
			o.write(&ch.reasoning, *r)
		}
	}
	for i := range d.ToolCalls {
		tc := &d.ToolCalls[i]
		idx := i
		if delta {
			idx = tc.Index
		}
		if call := ch.call(idx); call != nil {
			call.id = orKeep(call.id, tc.ID)
			call.name = orKeep(call.name, tc.Function.Name)
			o.write(&call.args, tc.Function.Arguments)
		}
	}
}

func orKeep(old, s string) string {
	if s != "" && len(s) <= maxNameLen {
		return s
	}
	return old
}

// maxNameLen bounds a tool call's id and name.
const maxNameLen = 256

// write adds s to b within what the capture may still keep.
func (o *outputCapture) write(b *strings.Builder, s string) {
	if room := maxCapture - o.size; room > 0 && s != "" {
		s = textcap.Cut(s, room)
		b.WriteString(s)
		o.size += len(s)
	}
}

// choice is the choice of index i, added when new (nil past maxChoicesKept).
func (o *outputCapture) choice(i int) *choiceOut {
	for k := range o.choices {
		if o.choices[k].index == i {
			return &o.choices[k]
		}
	}
	if len(o.choices) >= maxChoicesKept {
		return nil
	}
	o.choices = append(o.choices, choiceOut{index: i})
	return &o.choices[len(o.choices)-1]
}

// maxChoicesKept bounds the choices captured (n is at most 128 at OpenAI).
const maxChoicesKept = 128

func (ch *choiceOut) call(i int) *callOut {
	for k := range ch.calls {
		if ch.calls[k].index == i {
			return &ch.calls[k]
		}
	}
	if len(ch.calls) >= maxToolCalls {
		return nil
	}
	ch.calls = append(ch.calls, callOut{index: i})
	return &ch.calls[len(ch.calls)-1]
}

// messages are the captured choices in index order, those with anything
// in them.
func (o *outputCapture) messages() []otelstats.Message {
	chs := slices.Clone(o.choices)
	slices.SortStableFunc(chs, func(a, b choiceOut) int { return a.index - b.index })
	var msgs []otelstats.Message
	for i := range chs {
		ch := &chs[i]
		m := otelstats.Message{Role: ch.role, FinishReason: ch.finish}
		if m.Role == "" {
			m.Role = "assistant"
		}
		if ch.reasoning.Len() > 0 {
			m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartReasoning, Content: ch.reasoning.String()})
		}
		if ch.text.Len() > 0 {
			m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartText, Content: ch.text.String()})
		}
		for _, c := range ch.calls {
			m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartToolCall, ID: c.id, Name: c.name, Arguments: c.args.String()})
		}
		if len(m.Parts) > 0 {
			msgs = append(msgs, m)
		}
	}
	return msgs
}
