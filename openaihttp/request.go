package openaihttp

import (
	"bytes"
	"encoding/json"

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
	reqMessages // content capture only, as are prompt and input
	reqPrompt
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
		"max_completion_tokens", "max_output_tokens", "seed", "n", "frequency_penalty", "presence_penalty", "stop"},
	caps: []int{capModel, capScalar, capOptions, capScalar, capScalar, capScalar, capScalar,
		capScalar, capScalar, capScalar, capScalar, capScalar, capScalar, capStop},
}

// requestFieldsCapture adds the prompt's fields, kept up to maxCapture.
var requestFieldsCapture = &fieldSet{
	keys: append(append([]string(nil), requestFields.keys...), "messages", "prompt", "input"),
	caps: append(append([]int(nil), requestFields.caps...), maxCapture, maxCapture, maxCapture),
}

// info decodes what the scanner kept.
func requestInfoOf(s *fieldScanner) requestInfo {
	var ri requestInfo
	model, over := s.value(reqModel)
	_ = json.Unmarshal(model, &ri.Model)
	ri.ModelOver = over
	stream, _ := s.value(reqStream)
	_ = json.Unmarshal(stream, &ri.Stream)
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if raw, _ := s.value(reqStreamOptions); json.Unmarshal(raw, &so) == nil {
		ri.IncludeUsage = so.IncludeUsage
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
	return ri
}

// captureInputOf returns the request's messages, prompt or input as raw
// JSON (a string prompt unquoted), when the scanner kept them.
func captureInputOf(s *fieldScanner) string {
	if len(s.raw) <= reqInput {
		return ""
	}
	for _, i := range []int{reqMessages, reqPrompt, reqInput} {
		raw, _ := s.value(i)
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var str string
		if json.Unmarshal(raw, &str) == nil {
			return str
		}
		return string(raw)
	}
	return ""
}

func float(raw json.RawMessage) *float64 {
	var v float64
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return &v
}

func integer(raw json.RawMessage) *int64 {
	var v int64
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return &v
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
