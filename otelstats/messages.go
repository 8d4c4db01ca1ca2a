package otelstats

import (
	"slices"

	"github.com/llmtrace/llmtrace/internal/jsonstr"
)

// Message is one message of the OpenTelemetry GenAI conventions' chat
// history (gen_ai.input.messages) or of a model's answer
// (gen_ai.output.messages), in their JSON schema: a role and its parts.
type Message struct {
	Role  string // "system", "user", "assistant", "tool", …
	Name  string // the participant's name, when given
	Parts []MessagePart
	// FinishReason is an output message's (a choice's) reason: "stop",
	// "length", "content_filter", "tool_call", "error", or as given.
	FinishReason string
}

// MessagePart is one part of a Message. Type says which fields it uses:
//   - "text", "reasoning": Content;
//   - "tool_call": ID, Name, Arguments (the call's JSON arguments as text);
//   - "tool_call_response": ID, Content (the tool's response);
//   - "uri": Modality ("image", "audio", "video"), MimeType, URI;
//   - "blob": Modality, MimeType, Content (base64 data);
//   - any other: Type alone.
type MessagePart struct {
	Type      string
	Content   string
	ID, Name  string
	Arguments string
	Modality  string
	MimeType  string
	URI       string
}

// Part types of the GenAI conventions' message schema.
const (
	PartText             = "text"
	PartReasoning        = "reasoning"
	PartToolCall         = "tool_call"
	PartToolCallResponse = "tool_call_response"
	PartURI              = "uri"
	PartBlob             = "blob"
)

// TextMessage is a message of one text part.
func TextMessage(role, text string) Message {
	return Message{Role: role, Parts: []MessagePart{{Type: PartText, Content: text}}}
}

// truncMark ends a text the cap cut.
const truncMark = "…[truncated]"

// marshalMessages writes msgs as the conventions' JSON array within max
// bytes, always valid JSON: each free text (content, arguments, URI) runs
// through redact first; when the whole is too long, the longest texts are
// cut to one common length (short ones stay whole) and marked, and when
// even the messages' structure does not fit, the oldest messages go
// first. Nothing at all fits: "[]", or "" under two bytes.
func marshalMessages(msgs []Message, max int, redact func(string) string) string {
	msgs = redacted(msgs, redact)
	frames, frame := frameLens(msgs)
	for ; len(msgs) > 0; msgs, frames = msgs[1:], frames[1:] {
		if room := max - frame; room >= 0 {
			return string(appendMessages(nil, msgs, textLimit(msgs, room)))
		}
		frame -= frames[0] + 1 // the message and its comma
	}
	if max >= 2 {
		return "[]"
	}
	return ""
}

// frameLens is each message's length written with empty texts, and the
// whole array's, so the oldest can be dropped without writing the rest
// again (a thousand short messages under a small cap).
func frameLens(msgs []Message) (each []int, all int) {
	each = make([]int, len(msgs))
	var buf []byte
	all = 1 // "[" and "]", less the comma the first message does not have
	for i := range msgs {
		buf = appendMessages(buf[:0], msgs[i:i+1], -1)
		each[i] = len(buf) - 2
		all += each[i] + 1
	}
	return each, all
}

// redacted is msgs with every free text passed through redact, copied so
// the caller's messages stay as given.
func redacted(msgs []Message, redact func(string) string) []Message {
	if redact == nil {
		return msgs
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Parts = slices.Clone(m.Parts)
		for j := range m.Parts {
			p := &m.Parts[j]
			for _, s := range []*string{&p.Content, &p.Arguments, &p.URI} {
				if *s != "" {
					*s = redact(*s)
				}
			}
		}
		out[i] = m
	}
	return out
}

// textLimit is the longest escaped length each free text may keep so
// that all of them fit room bytes: no limit (a huge one) when they fit
// whole, else the one length L with Σ min(len, L) ≤ room, the largest such.
func textLimit(msgs []Message, room int) int {
	var lens []int
	total := 0
	eachText(msgs, func(s string) {
		n := jsonstr.Len(s)
		lens = append(lens, n)
		total += n
	})
	if total <= room {
		return int(^uint(0) >> 1)
	}
	slices.Sort(lens)
	for i, n := range lens {
		// The texts from i on are the longest: give each an equal share.
		share := room / (len(lens) - i)
		if n > share {
			return share
		}
		room -= n
	}
	return room
}

func eachText(msgs []Message, f func(string)) {
	for _, m := range msgs {
		for _, p := range m.Parts {
			for _, s := range [...]string{p.Content, p.Arguments, p.URI} {
				if s != "" {
					f(s)
				}
			}
		}
	}
}

// appendMessages writes msgs with each free text cut to limit escaped
// bytes; limit < 0 writes them empty (the structure's own length).
func appendMessages(dst []byte, msgs []Message, limit int) []byte {
	dst = append(dst, '[')
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":`...)
		dst = jsonstr.Append(dst, m.Role, false)
		dst = appendField(dst, "name", m.Name)
		dst = append(dst, `,"parts":[`...)
		for j := range m.Parts {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendPart(dst, &m.Parts[j], limit)
		}
		dst = append(dst, ']')
		dst = appendField(dst, "finish_reason", conventionFinish(m.FinishReason))
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// conventionFinish is the conventions' name of an OpenAI finish reason:
// OpenAI's "tool_calls" (and the older "function_call") is their
// "tool_call"; the rest are theirs as they are, or kept as given.
func conventionFinish(r string) string {
	if r == "tool_calls" || r == "function_call" {
		return "tool_call"
	}
	return r
}

// appendPart writes one part with the fields its type has in the schema.
func appendPart(dst []byte, p *MessagePart, limit int) []byte {
	dst = append(dst, `{"type":`...)
	dst = jsonstr.Append(dst, p.Type, false)
	text := func(k, v string) { dst = appendText(dst, k, v, limit) }
	switch p.Type {
	case PartText, PartReasoning:
		text("content", p.Content)
	case PartToolCall:
		dst = appendField(dst, "id", p.ID)
		dst = append(dst, `,"name":`...)
		dst = jsonstr.Append(dst, p.Name, false)
		if p.Arguments != "" {
			text("arguments", p.Arguments)
		}
	case PartToolCallResponse:
		dst = appendField(dst, "id", p.ID)
		text("response", p.Content)
	case PartURI, PartBlob:
		dst = append(dst, `,"modality":`...)
		dst = jsonstr.Append(dst, p.Modality, false)
		dst = appendField(dst, "mime_type", p.MimeType)
		if p.Type == PartURI {
			text("uri", p.URI)
		} else {
			text("content", p.Content)
		}
	}
	return append(dst, '}')
}

// appendField writes ,"k":"v" when v is set.
func appendField(dst []byte, k, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	dst = append(dst, '"', ':')
	return jsonstr.Append(dst, v, false)
}

// appendText writes ,"k":"v" (always: the schema requires it) with v cut
// to limit escaped bytes, marked when there is room for the mark.
func appendText(dst []byte, k, v string, limit int) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, k...)
	dst = append(dst, '"', ':')
	switch {
	case limit < 0:
		v = ""
	case jsonstr.Len(v) > limit && limit >= len(truncMark):
		v = jsonstr.Cut(v, limit-len(truncMark)) + truncMark
	default:
		v = jsonstr.Cut(v, limit)
	}
	return jsonstr.Append(dst, v, false)
}
