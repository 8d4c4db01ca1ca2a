package openaihttp

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

func ptr[T any](v T) *T { return &v }

func TestParseRequest(t *testing.T) {
	for _, c := range []struct {
		body string
		want requestInfo
	}{
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, requestInfo{Model: "m", Stream: true, IncludeUsage: true}},
		{`{"model":"m","temperature":0,"top_p":1,"top_k":40,"max_tokens":10,"seed":-1,"n":2,"frequency_penalty":0.1,"presence_penalty":0.2,"stop":"###"}`,
			requestInfo{Model: "m", Sampling: otelstats.SamplingParams{Temperature: ptr(0.0), TopP: ptr(1.0), TopK: ptr[int64](40), MaxTokens: ptr[int64](10),
				Seed: ptr[int64](-1), N: ptr[int64](2), FrequencyPenalty: ptr(0.1), PresencePenalty: ptr(0.2), Stop: []string{"###"}}}},
		// The newest max-tokens name wins.
		{`{"model":"m","max_tokens":10,"max_completion_tokens":20}`, requestInfo{Model: "m", Sampling: otelstats.SamplingParams{MaxTokens: ptr[int64](20)}}},
		{`{"model":"m","max_output_tokens":30}`, requestInfo{Model: "m", Sampling: otelstats.SamplingParams{MaxTokens: ptr[int64](30)}}},
		// Ill-typed fields cost themselves only.
		{`{"model":"m","temperature":"hot","max_tokens":1.5,"stream":"maybe","stop":[1,2],"n":null}`, requestInfo{Model: "m"}},
		// But "yes" is a bool to vLLM (pydantic's lax mode).
		{`{"model":"m","stream":"yes"}`, requestInfo{Model: "m", Stream: true}},
		{`{"model":["m"],"stream":true}`, requestInfo{Stream: true}},
		// Duplicate keys: the last wins, as in encoding/json; so does case.
		{`{"model":"a","model":"b"}`, requestInfo{Model: "b"}},
		{`{"MODEL":"a"}`, requestInfo{Model: "a"}},
		{`{"mod\u0065l":"esc"}`, requestInfo{Model: "esc"}},
		// The model after a long, nested prompt (the SDKs' order).
		{`{"messages":[{"role":"user","content":"a \"quoted\" [bracket} \\"},{"content":[{"type":"text"}]}],"model":"late"}`, requestInfo{Model: "late"}},
		// Truncated: the fields before the cut.
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"abc`, requestInfo{Model: "m", Stream: true}},
		{`{"stream":true,"model":"m`, requestInfo{Stream: true}},
		{`{"stream":true,"model":"m"`, requestInfo{Stream: true, Model: "m"}},
		{`{"seed":12`, requestInfo{}},
		// Malformed after the model; before it, a mismatched bracket stops the read.
		{`{"model":"m","messages":[}`, requestInfo{Model: "m"}},
		{`{"messages":[},"model":"m"}`, requestInfo{}},
		{`not json`, requestInfo{}},
		{``, requestInfo{}},
		{`[]`, requestInfo{}},
		{`{"stop":["a","","b","c","d","e","f","g","h","i","j"]}`, requestInfo{Sampling: otelstats.SamplingParams{Stop: []string{"a", "b", "c", "d", "e", "f", "g", "h"}}}},
		// A stop too long to read is dropped, and said so.
		{`{"model":"m","stop":"` + strings.Repeat("s", capStop) + `"}`, requestInfo{Model: "m", StopOver: true}},
		{`{"model":"` + strings.Repeat("m", capModel) + `"}`, requestInfo{ModelOver: true}},
	} {
		got := parseRequest([]byte(c.body))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("parse(%.80s)\n got %+v\nwant %+v", c.body, got, c.want)
		}
	}
}

// referenceFields is what encoding/json makes of a body's wanted fields.
type referenceFields struct {
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

// FuzzParseRequest: any body, fed in any pieces, parses without panicking
// to the same fields as when fed whole; a valid object with ASCII keys
// parses to what encoding/json finds in it; a prefix never knows a model
// the whole body has not.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"top_p":0.9,"max_tokens":256,"seed":42,"n":1,"frequency_penalty":0,"presence_penalty":0,"stop":["\n\n"]}`,
		`{"model":"gpt2","prompt":"Once upon","max_tokens":16,"stream":false,"stop":"."}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"max_output_tokens":100,"stream":true}`,
		`{"model":"m","messages":[}`,
		`{"model":"m","max_completion_tokens":1e3,"top_k":-1}`,
		`{"model":"\u00e9\ud83d\ude00","stop":["\u0000"]}`,
		`{"model":"a","model":"b","Model":"c"}`,
		`{"messages":[{"content":"` + strings.Repeat(`x\"`, 300) + `"}],"model":"m"}`,
		`{`, `}`, `[`, `"model"`, `null`, ``, "\xff\xfe", `{"model":"m"}garbage`, `{"a":{"b":{"c":[[[[{}]]]]}},"model":"m"}`,
		` { "model" : "m" , "stream" : true } `, `{"model":"m","n":2 ,"seed":3}`,
	} {
		f.Add([]byte(s), uint64(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, body []byte, splits uint64) {
		full := newFieldScanner(requestFields, nil)
		full.feed(body)
		whole := requestInfoOf(full)
		parts := newFieldScanner(requestFields, nil)
		rest := body
		for s := splits | 1; len(rest) > 0; s = s*6364136223846793005 + 1442695040888963407 {
			k := min(len(rest), int(s>>58)+1)
			parts.feed(rest[:k])
			rest = rest[k:]
		}
		if split := requestInfoOf(parts); !reflect.DeepEqual(split, whole) || parts.complete() != full.complete() {
			t.Fatalf("fed in pieces %+v (complete %v)\n fed whole %+v (complete %v)", split, parts.complete(), whole, full.complete())
		}
		if json.Valid(body) && isASCII(body) && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
			if !full.complete() {
				t.Fatal("a valid object read as incomplete")
			}
			var ref referenceFields
			if err := json.Unmarshal(body, &ref); err != nil {
				t.Fatal(err)
			}
			if within(&ref) {
				if want := referenceInfo(&ref); !reflect.DeepEqual(whole, want) {
					t.Fatalf("scanned %+v\nencoding/json %+v", whole, want)
				}
			}
		}
		cut := int(splits % uint64(len(body)+1))
		prefix := parseRequest(body[:cut])
		if prefix.Model != "" && whole.Model == "" && json.Valid(body) {
			t.Fatalf("prefix found model %q the whole body has not", prefix.Model)
		}
	})
}

// within reports whether every wanted value fits the scanner's caps.
func within(ref *referenceFields) bool {
	v := reflect.ValueOf(ref).Elem()
	for i := 0; i < v.NumField(); i++ {
		if len(v.Field(i).Bytes()) > requestFields.caps[i] {
			return false
		}
	}
	return true
}

func referenceInfo(ref *referenceFields) requestInfo {
	s := newFieldScanner(requestFields, nil)
	v := reflect.ValueOf(ref).Elem()
	for i := 0; i < v.NumField(); i++ {
		if raw := v.Field(i).Bytes(); raw != nil {
			start := len(s.buf)
			s.buf = append(s.buf, raw...)
			s.vals[i] = fieldValue{start: start, end: len(s.buf), ok: true}
		}
	}
	return requestInfoOf(s)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		weights []int
		total   int
		want    []int
	}{
		{[]int{1, 1, 1}, 3, []int{1, 1, 1}},
		{[]int{1, 1, 1}, 7, []int{3, 2, 2}},
		{[]int{2, 1}, 3, []int{2, 1}},
		{[]int{3, 1}, 4, []int{3, 1}},
		{[]int{2, 1}, 6, []int{4, 2}},
		{[]int{1}, 1, []int{1}},
		{[]int{5}, 9, []int{9}},
		// Fewer tokens than deliveries: never fewer than one each.
		{[]int{1, 1, 1, 1}, 2, []int{1, 1, 1, 1}},
	} {
		got := spread(nil, c.weights, c.total)
		sum := 0
		for _, n := range got {
			sum += n
			if n < 1 {
				t.Errorf("%v over %d: a delivery without tokens: %v", c.weights, c.total, got)
			}
		}
		if !reflect.DeepEqual(got, c.want) || sum != max(c.total, len(c.weights)) {
			t.Errorf("%v over %d: %v, want %v", c.weights, c.total, got, c.want)
		}
	}
}

// FuzzSpread: the parts always sum to the total, each at least one.
func FuzzSpread(f *testing.F) {
	f.Add([]byte{1, 2, 3}, uint16(10))
	f.Fuzz(func(t *testing.T, ws []byte, total uint16) {
		if len(ws) == 0 {
			return
		}
		w := make([]int, len(ws))
		for i, b := range ws {
			w[i] = int(b%8) + 1
		}
		tot := max(int(total), len(w))
		sum := 0
		for _, n := range spread(nil, w, tot) {
			if n < 1 {
				t.Fatalf("part %d", n)
			}
			sum += n
		}
		if sum != tot {
			t.Fatalf("sum %d, want %d", sum, tot)
		}
	})
}

// FuzzFieldDecoders holds the request fields' decoders to encoding/json:
// the same model string, number or nothing for any raw value; integers as
// pydantic's lax mode reads them (laxInt), through encoding/json.
func FuzzFieldDecoders(f *testing.F) {
	for _, s := range []string{`"llama"`, `"a\"b"`, `"é"`, "\"\xff\"", "\"a\x01\"", `"\u00e9"`, `""`, `"`, `5`, `-0`, `1.5`, `1e3`, `-1E-2`,
		`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `1e400`, `01`, `1.`, `.5`, `-`, `null`, `true`, `"5"`, `[1]`, `12abc`, ` 1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var got, want string
		jsonString(raw, &got)
		_ = json.Unmarshal(raw, &want)
		if got != want {
			t.Errorf("string %q: %q, encoding/json %q", raw, got, want)
		}
		var fw float64
		wantF := len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && json.Unmarshal(raw, &fw) == nil
		if gf := float(raw); (gf != nil) != wantF || gf != nil && *gf != fw {
			t.Errorf("float %q: %v, encoding/json %v (%v)", raw, gf, fw, wantF)
		}
		iw, wantI := laxInt(raw)
		if gi := integer(raw); (gi != nil) != wantI || gi != nil && *gi != iw {
			t.Errorf("integer %q: %v, pydantic's lax int %v (%v)", raw, gi, iw, wantI)
		}
	})
}

// laxInt is pydantic's lax int, written plainly with encoding/json: a JSON
// integer, a number without a fraction within ±2^53, or a string (without
// escapes) holding either, its spaces trimmed.
func laxInt(raw []byte) (int64, bool) {
	raw = bytes.Trim(raw, " \t\r\n")
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && !bytes.Contains(raw, []byte(`\`)) {
		raw = bytes.TrimSpace(raw[1 : len(raw)-1])
	}
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, false
	}
	var i int64
	if json.Unmarshal(raw, &i) == nil {
		return i, true
	}
	var f float64
	if json.Unmarshal(raw, &f) == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
		return int64(f), true
	}
	return 0, false
}
