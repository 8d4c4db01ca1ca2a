package otelstats

import "github.com/llmtrace/llmtrace/internal/textcap"

// ContentCapture opts into recording prompts and completions (SPEC §6). By
// default nothing of a request's content reaches the tracker's output: no
// prompt, no completion, no token ids — only counts and times.
type ContentCapture struct {
	// MaxBytes caps each recorded text (input and output), cut at a rune
	// boundary and marked with "…[truncated]" (unmarked when the cap is
	// smaller than the mark); 0 means DefaultContentMax.
	MaxBytes int
	// Redact, when set, rewrites each text before it is kept (e.g. to mask
	// e-mail addresses or keys). It runs before the cap.
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
// to the tracker. Unless content capture is on it does nothing; with it,
// each text is redacted, capped and put on the root span as
// gen_ai.input.messages and gen_ai.output.messages. Empty texts are
// skipped; a later call replaces what an earlier one gave.
func (q *Request) RecordContent(input, output string) {
	t, r := q.t, q.r
	if t == nil || r == nil || t.cfg.content == nil {
		return
	}
	in, out := t.cfg.content.prepare(input), t.cfg.content.prepare(output)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return
	}
	x := r.ext()
	if in != "" {
		x.input = in
	}
	if out != "" {
		x.output = out
	}
}

func (c *ContentCapture) prepare(s string) string {
	if s == "" {
		return ""
	}
	if c.Redact != nil {
		s = c.Redact(s)
	}
	if len(s) <= c.MaxBytes {
		return s
	}
	const mark = "…[truncated]"
	if c.MaxBytes < len(mark) {
		// No room for the mark: the cap is what the user asked for
		// (SPEC §6), so the head alone.
		return textcap.Cut(s, c.MaxBytes)
	}
	return textcap.Cut(s, c.MaxBytes-len(mark)) + mark
}
