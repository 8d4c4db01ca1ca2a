package otelstats

import "slices"

// ContentCapture opts into recording prompts and completions (SPEC §6). By
// default nothing of a request's content reaches the tracker's output: no
// prompt, no completion, no token ids — only counts and times.
type ContentCapture struct {
	// MaxBytes caps each recorded attribute's JSON (input and output):
	// the longest texts are cut on a rune boundary to one common length
	// and marked with "…[truncated]" (unmarked when there is no room for
	// the mark), the oldest messages dropped when even their structure
	// does not fit; the JSON stays valid. 0 means DefaultContentMax.
	MaxBytes int
	// Redact, when set, rewrites each free text (a part's content, tool
	// call arguments, a URI) before it is kept, e.g. to mask e-mail
	// addresses or keys. It runs before the cap.
	Redact func(string) string
}

// DefaultContentMax caps captured content per text.
const DefaultContentMax = 4096

// WithContentCapture turns content capture on (c non-nil) or off (nil).
// Without this option nothing is captured (otelconf turns it on from
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
func WithContentCapture(c *ContentCapture) Option {
	return optionFunc(func(cfg *config) {
		cfg.content = nil
		if c != nil {
			cp := *c
			if cp.MaxBytes <= 0 {
				cp.MaxBytes = DefaultContentMax
			}
			cfg.content = &cp
		}
	})
}

// CapturesContent reports whether content capture is on, so integrations
// can skip collecting what would be thrown away.
func (t *Tracker) CapturesContent() bool { return t.cfg.content != nil }

// RecordContent hands the request's prompt (input) and completion (output)
// to the tracker as plain texts: RecordMessages with one user message of
// input and one assistant message of output. Empty texts are skipped.
func (q *Request) RecordContent(input, output string) {
	var in, out []Message
	if input != "" {
		in = []Message{TextMessage("user", input)}
	}
	if output != "" {
		out = []Message{TextMessage("assistant", output)}
	}
	q.RecordMessages(in, out)
}

// RecordMessages hands the request's chat history (input) and the model's
// answer (output, one message per choice) to the tracker. Unless content
// capture is on it does nothing; with it, each is written in the GenAI
// conventions' message schema, every free text (content, tool arguments,
// URIs) redacted, the JSON capped at MaxBytes (marshalMessages: always
// valid JSON), and put on the root span as gen_ai.input.messages and
// gen_ai.output.messages. Empty lists are skipped; a later call replaces
// what an earlier one gave.
func (q *Request) RecordMessages(input, output []Message) {
	t, r := q.t, q.r
	if t == nil || r == nil || t.cfg.content == nil {
		return
	}
	c := t.cfg.content
	var in string
	if len(input) > 0 {
		in = marshalMessages(input, c.MaxBytes, c.Redact)
	}
	output = redacted(output, c.Redact)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return
	}
	x := r.ext()
	if in != "" {
		x.input = in
	}
	if len(output) > 0 {
		x.output = output
	}
}

// outputJSON writes the captured output messages; one without a finish
// reason takes its choice's from the frontend's FINISHED, else the
// request's (the conventions require one on every output message).
func (c *ContentCapture) outputJSON(msgs []Message, reasons []string, reason string) string {
	msgs = slices.Clone(msgs)
	for i := range msgs {
		switch {
		case msgs[i].FinishReason != "":
		case i < len(reasons) && reasons[i] != "":
			msgs[i].FinishReason = reasons[i]
		default:
			msgs[i].FinishReason = reason
		}
	}
	return marshalMessages(msgs, c.MaxBytes, nil)
}
