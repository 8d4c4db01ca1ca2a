package otelhttpmw

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/llmtrace/llmtrace/otelstats"
)

// requestInfo is what the middleware reads from an OpenAI-compatible request
// body. Absent or ill-typed fields stay zero: reading never fails, it only
// knows less.
type requestInfo struct {
	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	Sampling     otelstats.SamplingParams
}

func (ri *requestInfo) sampling() *otelstats.SamplingParams {
	p := ri.Sampling
	if p.Temperature == nil && p.TopP == nil && p.TopK == nil && p.MaxTokens == nil && p.Seed == nil &&
		p.N == nil && p.FrequencyPenalty == nil && p.PresencePenalty == nil && len(p.Stop) == 0 {
		return nil
	}
	return &p
}

// Bounds on what a request body can put on a span.
const (
	maxStopSequences = 8
	maxStopLength    = 64
)

// bodyFields are the top-level fields we read, each kept raw so that a
// field of an unexpected type costs that field only.
type bodyFields struct {
	Model               json.RawMessage `json:"model"`
	Stream              json.RawMessage `json:"stream"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	Temperature         json.RawMessage `json:"temperature"`
	TopP                json.RawMessage `json:"top_p"`
	TopK                json.RawMessage `json:"top_k"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	Seed                json.RawMessage `json:"seed"`
	N                   json.RawMessage `json:"n"`
	FrequencyPenalty    json.RawMessage `json:"frequency_penalty"`
	PresencePenalty     json.RawMessage `json:"presence_penalty"`
	Stop                json.RawMessage `json:"stop"`
}

// parseOpenAIBody reads the fields of a chat/completions/responses request
// body. b may be a whole body or only its first bytes (a body over the peek
// limit): a whole JSON object is decoded at once; anything else — a
// truncated prefix, or a body with a syntax error — is scanned key by key
// and keeps the top-level fields that came before the point where it
// stopped making sense. Duplicate keys: the last wins, as in encoding/json.
func parseOpenAIBody(b []byte) requestInfo {
	var f bodyFields
	if err := json.Unmarshal(b, &f); err != nil {
		f = scanFields(b)
	}
	return f.info()
}

// scanFields reads top-level fields of a JSON object from a prefix of it,
// up to the first error.
func scanFields(b []byte) bodyFields {
	var f bodyFields
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return f
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return f
		}
		key, ok := tok.(string)
		if !ok {
			return f
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return f
		}
		// encoding/json matches field names without regard to case; so
		// does the scan, so both paths read a body alike.
		if dst := f.field(strings.ToLower(key)); dst != nil {
			*dst = raw
		}
	}
	return f
}

func (f *bodyFields) field(key string) *json.RawMessage {
	switch key {
	case "model":
		return &f.Model
	case "stream":
		return &f.Stream
	case "stream_options":
		return &f.StreamOptions
	case "temperature":
		return &f.Temperature
	case "top_p":
		return &f.TopP
	case "top_k":
		return &f.TopK
	case "max_tokens":
		return &f.MaxTokens
	case "max_completion_tokens":
		return &f.MaxCompletionTokens
	case "max_output_tokens":
		return &f.MaxOutputTokens
	case "seed":
		return &f.Seed
	case "n":
		return &f.N
	case "frequency_penalty":
		return &f.FrequencyPenalty
	case "presence_penalty":
		return &f.PresencePenalty
	case "stop":
		return &f.Stop
	}
	return nil
}

func (f *bodyFields) info() requestInfo {
	var ri requestInfo
	_ = json.Unmarshal(f.Model, &ri.Model)
	_ = json.Unmarshal(f.Stream, &ri.Stream)
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if json.Unmarshal(f.StreamOptions, &so) == nil {
		ri.IncludeUsage = so.IncludeUsage
	}
	p := &ri.Sampling
	p.Temperature = float(f.Temperature)
	p.TopP = float(f.TopP)
	p.TopK = integer(f.TopK)
	// The newest name wins: max_completion_tokens replaced max_tokens in
	// chat; the Responses API says max_output_tokens.
	for _, raw := range []json.RawMessage{f.MaxOutputTokens, f.MaxCompletionTokens, f.MaxTokens} {
		if p.MaxTokens = integer(raw); p.MaxTokens != nil {
			break
		}
	}
	p.Seed = integer(f.Seed)
	p.N = integer(f.N)
	p.FrequencyPenalty = float(f.FrequencyPenalty)
	p.PresencePenalty = float(f.PresencePenalty)
	p.Stop = stops(f.Stop)
	return ri
}

func float(raw json.RawMessage) *float64 {
	var v float64
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	return &v
}

func integer(raw json.RawMessage) *int64 {
	var v int64
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	return &v
}

// stops reads "stop": a string or an array of strings, bounded.
func stops(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil
		}
		return []string{clip(one, maxStopLength)}
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil
	}
	var out []string
	for _, s := range many {
		if s == "" {
			continue
		}
		if len(out) == maxStopSequences {
			break
		}
		out = append(out, clip(s, maxStopLength))
	}
	return out
}

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// peekedBody replays the bytes the middleware read ahead, then the rest of
// the original body (or the error that stopped the read-ahead), so the
// handler reads exactly what it would have read without the middleware.
type peekedBody struct {
	buf  []byte
	err  error // the read-ahead's error, io.EOF when it read the whole body
	rest io.ReadCloser
}

func (b *peekedBody) Read(p []byte) (int, error) {
	if len(b.buf) > 0 {
		n := copy(p, b.buf)
		b.buf = b.buf[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.rest.Read(p)
}

func (b *peekedBody) Close() error { return b.rest.Close() }

// peek reads up to limit+1 bytes of body. complete says the whole body was
// read (the read-ahead met EOF within limit bytes).
func peek(body io.ReadCloser, limit int, hint int64) (prefix []byte, complete bool, replay *peekedBody) {
	size := 4096
	if hint > 0 && hint <= int64(limit) {
		size = int(hint) + 1
	}
	buf := make([]byte, 0, min(size, limit+1))
	var err error
	for zeros := 0; len(buf) <= limit && zeros < 100; {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		var n int
		n, err = body.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
		if n == 0 {
			zeros++ // a reader that makes no progress: leave it to the handler
		}
	}
	complete = err == io.EOF
	replay = &peekedBody{buf: buf, rest: body}
	if err != nil {
		replay.err = err
	}
	return buf, complete, replay
}
