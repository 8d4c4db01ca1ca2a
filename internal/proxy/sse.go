package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxEvent bounds one SSE event (and a non-stream body) the proxy reads;
// longer ones pass through unread.
const maxEvent = 1 << 20

// sseReader splits a text/event-stream into events as bytes arrive, in
// whatever pieces they arrive. It never holds more than one event.
type sseReader struct {
	line     []byte
	lineOver bool
	data     []byte
	hasData  bool
	dataOver bool
}

// feed reads p and calls ev with the data of every event it completes
// (multi-line data joined with '\n'); over says the event was too long to
// keep.
func (s *sseReader) feed(p []byte, ev func(data []byte, over bool)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.appendLine(p)
			return
		}
		s.appendLine(p[:i])
		p = p[i+1:]
		line := bytes.TrimSuffix(s.line, []byte{'\r'})
		s.endLine(line, ev)
		s.line, s.lineOver = s.line[:0], false
	}
}

func (s *sseReader) appendLine(p []byte) {
	if len(s.line)+len(p) > maxEvent {
		s.lineOver = true
		return
	}
	s.line = append(s.line, p...)
}

func (s *sseReader) endLine(line []byte, ev func([]byte, bool)) {
	if len(line) == 0 && !s.lineOver {
		if s.hasData {
			ev(s.data, s.dataOver)
		}
		s.data, s.hasData, s.dataOver = s.data[:0], false, false
		return
	}
	if s.lineOver {
		if bytes.HasPrefix(line, []byte("data")) {
			s.hasData, s.dataOver = true, true
		}
		return
	}
	field, value, _ := bytes.Cut(line, []byte{':'})
	if string(field) != "data" {
		return // comments (keep-alives), event:, id:, retry:
	}
	value = bytes.TrimPrefix(value, []byte{' '})
	if s.hasData {
		s.data = append(s.data, '\n')
	}
	if len(s.data)+len(value) > maxEvent {
		s.dataOver = true
	} else {
		s.data = append(s.data, value...)
	}
	s.hasData = true
}

// usage is an OpenAI usage object (chat/completions or Responses API).
type usage struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	InputTokens         *int `json:"input_tokens"`
	OutputTokens        *int `json:"output_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u *usage) prompt() (int, bool) {
	switch {
	case u == nil:
		return 0, false
	case u.PromptTokens != nil:
		return *u.PromptTokens, true
	case u.InputTokens != nil:
		return *u.InputTokens, true
	}
	return 0, false
}

func (u *usage) completion() (int, bool) {
	switch {
	case u == nil:
		return 0, false
	case u.CompletionTokens != nil:
		return *u.CompletionTokens, true
	case u.OutputTokens != nil:
		return *u.OutputTokens, true
	}
	return 0, false
}

func (u *usage) cached() (int, bool) {
	switch {
	case u == nil:
		return 0, false
	case u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil:
		return *u.PromptTokensDetails.CachedTokens, true
	case u.InputTokensDetails != nil && u.InputTokensDetails.CachedTokens != nil:
		return *u.InputTokensDetails.CachedTokens, true
	}
	return 0, false
}

// message is what the proxy reads from a stream chunk or a response body:
// chat completions, completions, embeddings and the Responses API.
type message struct {
	ID      string          `json:"id"`
	Model   string          `json:"model"`
	Object  string          `json:"object"` // "response": a Responses API body
	Status  string          `json:"status"` // its status
	Type    string          `json:"type"`   // a Responses API event
	Delta   json.RawMessage `json:"delta"`  // its text
	Choices []struct {
		Text    *string `json:"text"`
		Delta   *part   `json:"delta"`
		Message *part   `json:"message"`
		Finish  *string `json:"finish_reason"`
	} `json:"choices"`
	Usage      *usage          `json:"usage"`
	Error      json.RawMessage `json:"error"`
	Incomplete *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Response *struct {
		ID         string `json:"id"`
		Model      string `json:"model"`
		Status     string `json:"status"`
		Usage      *usage `json:"usage"`
		Incomplete *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	} `json:"response"`
}

// part is a choice's delta or message.
type part struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	Refusal          *string         `json:"refusal"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
	FunctionCall     json.RawMessage `json:"function_call"`
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

func present(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "[]" && s != "{}" && s != `""`
}

func (p *part) content() bool {
	return p != nil && (nonEmpty(p.Content) || nonEmpty(p.ReasoningContent) || nonEmpty(p.Reasoning) ||
		nonEmpty(p.Refusal) || present(p.ToolCalls) || present(p.FunctionCall))
}

// contentChoices is how many choices of m carry content (a Responses API
// delta counts one); a role-only or usage-only chunk has none.
func (m *message) contentChoices() int {
	n := 0
	for _, c := range m.Choices {
		if nonEmpty(c.Text) || c.Delta.content() || c.Message.content() {
			n++
		}
	}
	if n == 0 && strings.HasSuffix(m.Type, ".delta") && present(m.Delta) {
		n = 1
	}
	return n
}

// finish is the first finish reason in m ("" if none), mapping the
// Responses API's final events; errType is set for a failed response.
func (m *message) finish() (reason, errType string) {
	for _, c := range m.Choices {
		if nonEmpty(c.Finish) {
			return *c.Finish, ""
		}
	}
	status, incomplete := m.Status, m.Incomplete
	switch m.Type {
	case "response.completed", "response.incomplete", "response.failed":
		status = strings.TrimPrefix(m.Type, "response.")
		if m.Response != nil {
			incomplete = m.Response.Incomplete
		}
	case "error":
		return "error", "stream_error"
	default:
		if m.Object != "response" {
			status = ""
		}
	}
	switch status {
	case "completed":
		return "stop", ""
	case "incomplete":
		if incomplete != nil && incomplete.Reason != "" && incomplete.Reason != "max_output_tokens" {
			return incomplete.Reason, ""
		}
		return "length", ""
	case "failed":
		return "error", "response_failed"
	}
	if present(m.Error) {
		return "error", "stream_error"
	}
	return "", ""
}

func (m *message) usage() *usage {
	if m.Usage != nil {
		return m.Usage
	}
	if m.Response != nil {
		return m.Response.Usage
	}
	return nil
}
