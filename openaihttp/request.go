package openaihttp

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/llmtrace/llmtrace/otelstats"
)

// requestInfo is what the layer reads from an OpenAI-compatible request
// body. Absent or ill-typed fields stay zero: reading never fails, it only
// knows less.
type requestInfo struct {
	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	Sampling     otelstats.SamplingParams
	// ModelOver: the body's model was longer than the layer reads (4 KiB
	// of JSON): it is recorded as UnknownModel.
	ModelOver bool
	// StopOver: the body's stop was longer than the layer reads (8 KiB of
	// JSON): it is dropped, and counted.
	StopOver bool
	// Batch is the number of prompts of a completion's batch (a prompt
	// that is an array of strings or of token arrays), each with its n
	// choices: 0 for no batch, -1 for one not read to its end.
	Batch int
}

func (ri *requestInfo) sampling() *otelstats.SamplingParams {
	p := ri.Sampling
	if p.Temperature == nil && p.TopP == nil && p.TopK == nil && p.MaxTokens == nil && p.Seed == nil &&
		p.N == nil && p.FrequencyPenalty == nil && p.PresencePenalty == nil && len(p.Stop) == 0 {
		return nil
	}
	return &p
}

// The request body's wanted top-level fields, in requestFields order.
const (
	reqModel = iota
	reqStream
	reqStreamOptions
	reqTemperature
	reqTopP
	reqTopK
	reqMaxTokens
	reqMaxCompletionTokens
	reqMaxOutputTokens
	reqSeed
	reqN
	reqFrequencyPenalty
	reqPresencePenalty
	reqStop
	reqPrompt   // its elements counted; kept for content capture only
	reqMessages // content capture only, as is input
	reqInput
)

// Caps on the raw JSON the scanner keeps of a request's fields. A model's
// JSON may be four times the tracker's cap (escapes); stop sequences are
// cut by the tracker to 8 × 128 bytes, so 8 KiB of JSON is plenty, and a
// longer "stop" (a 5 MiB one was seen to block every export) is dropped.
const (
	capModel   = 4 << 10
	capScalar  = 64
	capOptions = 1 << 10
	capStop    = 8 << 10
)

var requestFields = &fieldSet{
	keys: []string{"model", "stream", "stream_options", "temperature", "top_p", "top_k", "max_tokens",
		"max_completion_tokens", "max_output_tokens", "seed", "n", "frequency_penalty", "presence_penalty", "stop", "prompt"},
	caps: []int{capModel, capScalar, capOptions, capScalar, capScalar, capScalar, capScalar,
		capScalar, capScalar, capScalar, capScalar, capScalar, capScalar, capStop, 0},
	counts: 1 << reqPrompt,
}

// requestFieldsCapture adds the prompt's fields, of which the first
// maxCapture bytes are kept.
var requestFieldsCapture = func() *fieldSet {
	fs := &fieldSet{
		keys:   append(append([]string(nil), requestFields.keys...), "messages", "input"),
		caps:   append(append([]int(nil), requestFields.caps...), maxCapture, maxCapture),
		heads:  1<<reqMessages | 1<<reqPrompt | 1<<reqInput,
		counts: requestFields.counts,
	}
	fs.caps[reqPrompt] = maxCapture
	return fs
}()

// info decodes what the scanner kept.
func requestInfoOf(s *fieldScanner) requestInfo {
	var ri requestInfo
	model, over := s.value(reqModel)
	jsonString(model, &ri.Model)
	ri.ModelOver = over
	stream, _ := s.value(reqStream)
	ri.Stream = laxBool(stream)
	switch raw, _ := s.value(reqStreamOptions); string(raw) {
	case `{"include_usage":true}`:
		ri.IncludeUsage = true
	case `{"include_usage":false}`, "":
	default:
		var so struct {
			IncludeUsage json.RawMessage `json:"include_usage"`
		}
		if json.Unmarshal(raw, &so) == nil {
			ri.IncludeUsage = laxBool(so.IncludeUsage)
		}
	}
	v := func(i int) json.RawMessage { raw, _ := s.value(i); return raw }
	p := &ri.Sampling
	p.Temperature = float(v(reqTemperature))
	p.TopP = float(v(reqTopP))
	p.TopK = integer(v(reqTopK))
	// The newest name wins: max_completion_tokens replaced max_tokens in
	// chat; the Responses API says max_output_tokens.
	for _, i := range []int{reqMaxOutputTokens, reqMaxCompletionTokens, reqMaxTokens} {
		if p.MaxTokens = integer(v(i)); p.MaxTokens != nil {
			break
		}
	}
	p.Seed = integer(v(reqSeed))
	p.N = integer(v(reqN))
	p.FrequencyPenalty = float(v(reqFrequencyPenalty))
	p.PresencePenalty = float(v(reqPresencePenalty))
	p.Stop = stops(v(reqStop))
	_, ri.StopOver = s.value(reqStop)
	ri.Batch = s.batch()
	return ri
}

// captureInputOf returns the request's messages, prompt or input as the
// conventions' messages, when the scanner kept them; cut says they are
// read from their head only: they were longer than maxCapture, or beyond
// what was read.
func captureInputOf(s *fieldScanner) (input []otelstats.Message, cut bool) {
	if len(s.vals) <= reqInput {
		return nil, false
	}
	for _, i := range []int{reqMessages, reqPrompt, reqInput} {
		raw, cut := s.head(i)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if raw[0] == '"' {
			text := headText(raw)
			if !cut {
				text, _ = stringOf(raw)
			}
			return []otelstats.Message{otelstats.TextMessage("user", text)}, cut
		}
		return inputMessages(i, raw), cut
	}
	return nil, false
}

// headText is the head of a JSON value cut short, as text: a string's
// unquoted (an escape cut in two left out), anything else's raw JSON;
// either without a rune cut in two, as the completion is cut.
func headText(raw []byte) string {
	if raw[0] == '"' {
		head := wholeRunes(stringHead(raw))
		var s string
		if json.Unmarshal(append(head[:len(head):len(head)], '"'), &s) == nil {
			return s
		}
	}
	return string(wholeRunes(raw))
}

// stringHead is the part of a JSON string cut short (its opening quote,
// no closing one) that ends outside an escape: an escape cut in two is
// left out.
func stringHead(raw []byte) []byte {
	for i := 1; ; {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return raw
		}
		i += j
		n := escapeLen(raw[i:])
		if i+n > len(raw) {
			return raw[:i]
		}
		i += n
	}
}

// escapeLen is the length of the escape e begins with. A surrogate pair's
// first half counts its second, which may be cut off: alone it would
// decode as U+FFFD.
func escapeLen(e []byte) int {
	switch {
	case len(e) < 2 || e[1] != 'u':
		return 2
	case len(e) >= 6 && isHighSurrogate(e[2:6]) && (len(e) < 8 || e[6] == '\\' && e[7] == 'u'):
		return 12
	}
	return 6
}

// isHighSurrogate reports whether hex, four hex digits, is U+D800–U+DBFF.
func isHighSurrogate(hex []byte) bool {
	v, err := strconv.ParseUint(string(hex), 16, 16)
	return err == nil && v >= 0xD800 && v <= 0xDBFF
}

// wholeRunes is b without a UTF-8 sequence cut in two at its end.
func wholeRunes(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// float reads a number as encoding/json would into a float64 (nil for
// anything else, or out of range).
func float(raw json.RawMessage) *float64 {
	raw = bytes.Trim(raw, " \t\r\n")
	if _, ok := jsonNumber(raw); !ok {
		return nil
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return nil
	}
	return &v
}

// integer reads an integer as vLLM's request models (pydantic, lax mode)
// do: a JSON integer, a number without a fraction (16.0, 1.6e1), or a
// string holding either ("16"); nil for anything else — a fraction or a
// value out of range, which vLLM rejects, or a string with an escape in
// it, which no client writes for a number.
func integer(raw json.RawMessage) *int64 {
	raw = bytes.Trim(raw, " \t\r\n")
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// "16": vLLM's request models (pydantic, lax mode) take a string
		// holding a number, its whitespace trimmed.
		raw = bytes.TrimSpace(raw[1 : len(raw)-1])
	}
	isInt, ok := jsonNumber(raw)
	if !ok {
		return nil
	}
	if !isInt {
		// 16.0: lax mode takes a float without a fraction.
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil
		}
		v := int64(f)
		return &v
	}
	v, ok := parseInt64(raw)
	if !ok {
		return nil
	}
	return &v
}

// laxBool reads a boolean as vLLM's request models (pydantic, lax mode)
// do: true and false, the numbers 0 and 1 (1.0 too), and the strings
// "1", "true", "t", "yes", "y", "on" and "0", "false", "f", "no", "n",
// "off" in any case. Anything else — null, which vLLM takes for its
// default false, or a value it rejects — is false.
func laxBool(raw []byte) bool {
	switch string(raw) {
	case "true":
		return true
	case "false", "", "null":
		return false
	}
	if integer, ok := jsonNumber(raw); ok {
		if integer {
			return string(raw) == "1"
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		return err == nil && f == 1
	}
	var str string
	if len(raw) > 32 || raw[0] != '"' {
		return false // no string it takes is that long, even escaped
	}
	jsonString(raw, &str)
	for _, t := range [...]string{"1", "true", "t", "yes", "y", "on"} {
		if strings.EqualFold(str, t) {
			return true
		}
	}
	return false
}

// jsonNumber reports whether raw is exactly one JSON number, and whether
// it is an integer.
func jsonNumber(raw []byte) (integer, ok bool) {
	if len(raw) == 0 {
		return false, false
	}
	p := chunkParser{b: raw}
	integer = p.number()
	return integer, !p.bad && p.i == len(raw)
}

// jsonString decodes a JSON string into dst as encoding/json does, the
// usual one — no escapes, no control characters, valid UTF-8, which
// Unmarshal would return as it is — without it. Anything else is
// Unmarshal's (which leaves dst alone for a non-string).
func jsonString(raw []byte, dst *string) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		inner := raw[1 : len(raw)-1]
		plain := utf8.Valid(inner)
		for _, c := range inner {
			if c < 0x20 || c == '\\' || c == '"' {
				plain = false
				break
			}
		}
		if plain {
			*dst = string(inner)
			return
		}
	}
	_ = json.Unmarshal(raw, dst)
}

// stops reads "stop": a string or an array of strings. The tracker caps
// their number and length (and counts the cuts); empty ones mean nothing.
func stops(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil
		}
		return []string{one}
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil {
		return nil
	}
	out := many[:0]
	for _, s := range many {
		if s != "" && len(out) < otelstats.MaxStopSequences {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// parseRequest reads a whole (or truncated) body at once: for tests and
// fuzzing, the same path the layer takes when bytes stream by.
func parseRequest(b []byte) requestInfo {
	s := newFieldScanner(requestFields, nil)
	s.feed(b)
	return requestInfoOf(s)
}
