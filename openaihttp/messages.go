package openaihttp

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/llmtrace/llmtrace/otelstats"
)

// The request's messages, prompt or input become the GenAI conventions'
// chat history (otelstats.Message), read from their JSON as sent — its
// first maxCapture bytes: a message cut short there is left out, the ones
// before it kept.

// maxMessages bounds the messages and parts read from one request or
// response.
const maxMessages = 1024

// itemJSON is one element of a request's messages (chat), input
// (Responses API) or, as a message, a response's choice: one struct for
// every shape, so one reader serves them all.
type itemJSON struct {
	Type             string          `json:"type"`
	Role             string          `json:"role"`
	Name             string          `json:"name"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []toolCallJSON  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	// The Responses API's function calls and their outputs.
	CallID    string          `json:"call_id"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

type toolCallJSON struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// partJSON is one content part: chat's text, image_url, input_audio and
// video_url; the Responses API's input_text, output_text and input_image.
type partJSON struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"` // {"url": …} in chat, a string in Responses
	VideoURL struct {
		URL string `json:"url"`
	} `json:"video_url"`
	InputAudio struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
}

// inputMessages reads the request's field (reqMessages, reqPrompt or
// reqInput) whose JSON, an array or its head, is raw.
func inputMessages(field int, raw []byte) []otelstats.Message {
	var msgs []otelstats.Message
	eachElement(raw, func(el json.RawMessage) {
		if field == reqPrompt {
			var s string
			if json.Unmarshal(el, &s) == nil { // token ids are not text
				msgs = append(msgs, otelstats.TextMessage("user", s))
			}
			return
		}
		if s, ok := stringOf(el); ok { // a Responses API input item may be a string
			msgs = append(msgs, otelstats.TextMessage("user", s))
			return
		}
		var it itemJSON
		if json.Unmarshal(el, &it) == nil {
			msgs = append(msgs, it.message())
		}
	})
	return msgs
}

// eachElement calls f with each element of the JSON array raw, in order,
// as long as they are whole: raw may be an array's head cut short.
func eachElement(raw []byte, f func(json.RawMessage)) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return
	}
	for n := 0; n < maxMessages && dec.More(); n++ {
		off := dec.InputOffset()
		var el json.RawMessage
		if dec.Decode(&el) != nil {
			// The array's head ends inside this element: keep what it
			// holds, closed.
			if el = closeCut(raw[off:]); el != nil {
				f(el)
			}
			return
		}
		f(el)
	}
}

// closeCut makes a JSON value cut short whole: a string cut in it is
// closed (an escape or a rune cut in two left out) and so are the arrays
// and objects open at the cut; when that is no JSON (the cut fell in a
// key, after a colon or in a number), the value is closed after its last
// whole member instead. Nil when neither gives JSON.
func closeCut(raw []byte) []byte {
	raw = bytes.TrimLeft(raw, " \t\r\n,")
	var open []byte       // the closers owed, innermost last
	var safe []int        // ends of whole members, newest last
	var safeOpen [][]byte // open at each of them
	inStr, strAt := false, 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inStr && c == '\\':
			i++
		case inStr:
			inStr = c != '"'
		case c == '"':
			inStr, strAt = true, i
		case c == '{':
			open = append(open, '}')
		case c == '[':
			open = append(open, ']')
		case c == '}' || c == ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		case c == ',':
			if len(safe) == maxSafe {
				safe, safeOpen = safe[1:], safeOpen[1:]
			}
			safe, safeOpen = append(safe, i), append(safeOpen, slices.Clone(open))
		}
	}
	head := slices.Clone(raw)
	if inStr {
		head = append(slices.Clone(raw[:strAt]), wholeRunes(stringHead(raw[strAt:]))...)
		head = append(head, '"')
	}
	if v := withClosers(head, open); json.Valid(v) {
		return v
	}
	for k := len(safe) - 1; k >= 0; k-- {
		if v := withClosers(slices.Clone(raw[:safe[k]]), safeOpen[k]); json.Valid(v) {
			return v
		}
	}
	return nil
}

// maxSafe bounds the members closeCut steps back over.
const maxSafe = 8

// withClosers appends the closers owed, innermost first.
func withClosers(b, open []byte) []byte {
	for i := len(open) - 1; i >= 0; i-- {
		b = append(b, open[i])
	}
	return b
}

func stringOf(raw json.RawMessage) (string, bool) {
	var s string
	return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
}

// message is the item as a conventions' message.
func (it *itemJSON) message() otelstats.Message {
	m := otelstats.Message{Role: it.Role, Name: it.Name}
	switch it.Type {
	case "function_call":
		m.Role, m.Name = "assistant", "" // the name is the function's
		m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartToolCall, ID: it.CallID, Name: it.Name, Arguments: it.Arguments})
		return m
	case "function_call_output":
		m.Role = "tool"
		m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartToolCallResponse, ID: it.CallID, Content: textOf(it.Output)})
		return m
	case "reasoning":
		m.Role = "assistant"
		for _, s := range it.Summary {
			m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartReasoning, Content: s.Text})
		}
		if t := textOf(it.Content); t != "" { // reasoning_text parts
			m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartReasoning, Content: t})
		}
		return m
	}
	if it.ReasoningContent != "" {
		m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartReasoning, Content: it.ReasoningContent})
	}
	if it.Role == "tool" {
		m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartToolCallResponse, ID: it.ToolCallID, Content: textOf(it.Content)})
	} else {
		m.Parts = appendContentParts(m.Parts, it.Content)
	}
	for _, tc := range it.ToolCalls {
		m.Parts = append(m.Parts, otelstats.MessagePart{Type: otelstats.PartToolCall, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if m.Parts == nil {
		m.Parts = []otelstats.MessagePart{}
	}
	return m
}

// textOf is a content's text: a string, or its text parts joined.
func textOf(raw json.RawMessage) string {
	if s, ok := stringOf(raw); ok {
		return s
	}
	var b strings.Builder
	eachElement(raw, func(el json.RawMessage) {
		var p partJSON
		if json.Unmarshal(el, &p) == nil {
			b.WriteString(p.Text)
		}
	})
	return b.String()
}

// appendContentParts adds a content's parts: a string is one text part.
func appendContentParts(parts []otelstats.MessagePart, raw json.RawMessage) []otelstats.MessagePart {
	if s, ok := stringOf(raw); ok {
		return append(parts, otelstats.MessagePart{Type: otelstats.PartText, Content: s})
	}
	eachElement(raw, func(el json.RawMessage) {
		var p partJSON
		if json.Unmarshal(el, &p) == nil {
			parts = append(parts, p.part())
		}
	})
	return parts
}

// part is a content part as the conventions': text, an image, audio or
// video by URI, or inline (a data: URL or base64 audio) as a blob.
func (p *partJSON) part() otelstats.MessagePart {
	switch p.Type {
	case "text", "input_text", "output_text":
		return otelstats.MessagePart{Type: otelstats.PartText, Content: p.Text}
	case "image_url", "input_image":
		url, ok := stringOf(p.ImageURL)
		if !ok {
			var u struct {
				URL string `json:"url"`
			}
			_ = json.Unmarshal(p.ImageURL, &u)
			url = u.URL
		}
		return mediaPart("image", url)
	case "video_url":
		return mediaPart("video", p.VideoURL.URL)
	case "input_audio":
		mime := ""
		if p.InputAudio.Format != "" {
			mime = "audio/" + p.InputAudio.Format
		}
		return otelstats.MessagePart{Type: otelstats.PartBlob, Modality: "audio", MimeType: mime, Content: p.InputAudio.Data}
	}
	return otelstats.MessagePart{Type: p.Type}
}

// mediaPart is a URI part, or a blob for a data: URL ("data:image/png;base64,…").
func mediaPart(modality, url string) otelstats.MessagePart {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok {
			mime, _, _ := strings.Cut(meta, ";")
			return otelstats.MessagePart{Type: otelstats.PartBlob, Modality: modality, MimeType: mime, Content: data}
		}
	}
	return otelstats.MessagePart{Type: otelstats.PartURI, Modality: modality, URI: url}
}
