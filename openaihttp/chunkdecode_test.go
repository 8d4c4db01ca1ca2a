package openaihttp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// chunkSeeds are chunks as servers send them, and the corners of the
// scanner's rules.
var chunkSeeds = []string{
	// vLLM, OpenAI, SGLang, TGI, llama.cpp, Ollama chat chunks.
	`{"id":"chatcmpl-6f2a1b","object":"chat.completion.chunk","created":1733000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-6f2a1b","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"chatcmpl-6f2a1b","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length","stop_reason":null}]}`,
	`{"id":"chatcmpl-6f2a1b","object":"chat.completion.chunk","created":1733000000,"model":"m","choices":[],"usage":{"prompt_tokens":12,"total_tokens":28,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":8}}}`,
	`{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null}],"usage":null}`,
	`{"choices":[{"delta":{"reasoning_content":"think"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"choices":[{"text":"x","index":0,"logprobs":null,"finish_reason":null}],"model":"m","object":"text_completion"}`,
	`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"audio":{"id":"audio_1"}},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"audio":{"transcript":"Hi"}}},{"delta":{"audio":{"data":"UklG","transcript":""}}},{"delta":{"audio":{"expires_at":1}}}]}`,
	`{"choices":[{"delta":{"audio":"x"}},{"delta":{"audio":null}},{"delta":{"audio":[1]}},{"delta":{"audio":{"Data":"x","transcript":{}}}}]}`,
	`{"choices":[{"delta":{"content":"a"},"finish_reason":null},{"delta":{"content":"b"},"finish_reason":"stop"}]}`,
	`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel","sequence_number":4}`,
	`{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"m","usage":{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":0},"total_tokens":12}}}`,
	`{"type":"response.incomplete","response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"content_filter"}}}`,
	`{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"x"},"incomplete_details":null}`,
	`{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`,
	`{"object":"error","message":"x","type":"BadRequestError","code":400}`,
	// Whitespace, escapes, unicode, empty values.
	" {\n \"id\" : \"a\\u00e9\\n\" ,\r\n\t\"choices\" : [ { \"delta\" : { \"content\" : \"\\\"q\\\"\" } } ] } \n",
	`{"id":"\u00e9\ud83d\ude00","model":"é—","choices":[{"delta":{"content":[]}},{"delta":{"content":{}}},{"delta":{"content":null}},{"delta":{"content":[ ]}},null]}`,
	`{"choices":null,"usage":{},"response":null,"incomplete_details":{}}`,
	`{"delta":null,"error":"","type":null,"status":7,"id":{"a":1},"model":["m"]}`,
	`{}`, `{"":1}`, `{"x":{"y":[1,2,{"z":[true,false,null,-0.5e+3,1E-2]}]}}`,
	// Numbers a count takes or ignores.
	`{"usage":{"prompt_tokens":-0,"completion_tokens":9223372036854775807}}`,
	`{"usage":{"prompt_tokens":-9223372036854775808}}`,
	`{"usage":{"prompt_tokens":9223372036854775808}}`,
	`{"usage":{"prompt_tokens":1.0}}`, `{"usage":{"prompt_tokens":1e3}}`, `{"usage":{"prompt_tokens":"5"}}`,
	`{"usage":{"prompt_tokens":null,"completion_tokens":00}}`,
	// Choice indexes the layer tracks or does not.
	`{"choices":[{"index":1,"finish_reason":"stop"},{"index":null},{"index":127},{"index":128},{"index":-1},{"index":1.0},{"index":"0"},{"index":1e0}]}`,
	`{"choices":[{"index":01}]}`, `{"choices":[{"index":0,"index":1}]}`,
	// What the scanner leaves to encoding/json.
	`{"ID":"upper","Choices":[{"Delta":{"Content":"x"}}]}`,
	`{"id":"a","id":"b"}`, `{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"choices":[{"delta":{"content":"a"}}],"choices":[{"text":"b"}]}`,
	`{"choices":[{"delta":{"audio":{"data":"x"},"audio":{}}}]}`,
	`{"ſtatus":"x","\u0069d":"escaped key"}`,
	`{"choices":{"delta":{}}}`, `{"choices":[{"delta":"x"}]}`, `{"usage":[]}`, `{"choices":[1]}`,
	`[{"choices":[]}]`, `null`, `"x"`, `5`, ``, ` `,
	strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70),
	// Invalid JSON.
	`{"id":"a",}`, `{"id":"a"`, `{"id":"a"}x`, "{}\x00", `{"id":"a"}{}`, `{"id":'a'}`, `{"choices":[,]}`, `{"choices":[{},]}`,
	`{"x":[1,]}`, `{"x":01}`, `{"x":-}`, `{"x":1.}`, `{"x":.5}`, `{"x":1e}`, `{"x":tru}`, `{"x":"\x01"}`, `{"x":"\q"}`,
	`{"x":"\u12"}`, `{"x":"a` + "\xff\xfe" + `"}`, `{id:1}`, `{"a" 1}`, `{"a":1 "b":2}`,
}

// richChunk uses every part of a chunk's store.
const richChunk = `{"id":"a","model":"m","object":"response","type":"t","status":"incomplete","delta":"d","error":{},` +
	`"choices":[{"delta":{"content":"x","tool_calls":[]},"message":{"refusal":"r"},"text":"t","finish_reason":"stop"},{"text":""}],` +
	`"usage":{"prompt_tokens":1,"completion_tokens":2,"input_tokens":3,"output_tokens":4,"prompt_tokens_details":{"cached_tokens":5},"input_tokens_details":{"cached_tokens":6}},` +
	`"incomplete_details":{"reason":"x"},"response":{"id":"r","model":"m","status":"failed","incomplete_details":{"reason":"y"},` +
	`"usage":{"prompt_tokens":7,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":9},"input_tokens_details":{"cached_tokens":10}}}}`

// FuzzChunkDecode holds the scanner to encoding/json: whenever it decodes
// an event itself, json.Unmarshal accepts the event too and fills the same
// chunk.
func FuzzChunkDecode(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow chunkJSON
		fast.Choices, slow.Choices = make([]choiceJSON, 0, 1), make([]choiceJSON, 0, 1) // reused storage, as in a stream
		fast.reset()
		p := chunkParser{b: data}
		scanned := p.chunk(&fast)
		slow.reset()
		err := json.Unmarshal(data, &slow)
		if scanned && err != nil {
			t.Fatalf("scanner accepted %q, encoding/json: %v", data, err)
		}
		if scanned && !reflect.DeepEqual(chunkView(&fast), chunkView(&slow)) {
			t.Fatalf("%q\nscanner       %+v\nencoding/json %+v", data, chunkView(&fast), chunkView(&slow))
		}
		// decode as a stream does: into the chunk the last event used.
		var c chunkJSON
		if !c.decode([]byte(richChunk)) {
			t.Fatal("the rich chunk did not decode")
		}
		if ok := c.decode(data); ok != (err == nil) || ok && !reflect.DeepEqual(chunkView(&c), chunkView(&slow)) {
			t.Fatalf("decode(%q) = %v, %+v; encoding/json: %v, %+v", data, ok, chunkView(&c), err, chunkView(&slow))
		}
	})
}

// chunkView is what the layer reads of c, for comparison: the scanner's
// store left out (its pointers are followed), no choices the same as none.
func chunkView(c *chunkJSON) chunkJSON {
	v := *c
	v.store = chunkStore{}
	if len(v.Choices) == 0 {
		v.Choices = nil
	}
	return v
}

// TestChunkScannerTakesServersChunks: the chunks servers send are decoded
// by the scanner itself, not handed to encoding/json; what it leaves to
// encoding/json still decodes.
func TestChunkScannerTakesServersChunks(t *testing.T) {
	for i, s := range chunkSeeds[:26] {
		var c chunkJSON
		c.reset()
		p := chunkParser{b: []byte(s)}
		if !p.chunk(&c) {
			t.Errorf("seed %d %q: left to encoding/json", i, s)
		}
	}
	for _, tc := range []struct {
		json  string
		valid bool // for encoding/json
	}{
		{`{"ID":"upper"}`, true}, {`{"id":"a","id":"b"}`, true}, {`null`, true},
		{`{"usage":{"prompt_tokens":"5"}}`, true}, {`{"id":"a",}`, false},
	} {
		var c chunkJSON
		c.reset()
		p := chunkParser{b: []byte(tc.json)}
		if p.chunk(&c) {
			t.Errorf("%q: the scanner took it", tc.json)
		}
		if c.decode([]byte(tc.json)) != tc.valid {
			t.Errorf("%q: decoded %v, want %v", tc.json, !tc.valid, tc.valid)
		}
	}
	// Counts written as integral floats, by the scanner itself.
	for _, tc := range []struct {
		json string
		want tokenCount
	}{
		{`{"usage":{"prompt_tokens":12.0}}`, 12}, {`{"usage":{"prompt_tokens":1.2e1}}`, 12},
		{`{"usage":{"prompt_tokens":12.5}}`, -1}, {`{"usage":{"prompt_tokens":1e300}}`, -1},
		{`{"usage":{"prompt_tokens":-0.0}}`, 0}, {`{"usage":{"prompt_tokens":9223372036854775808}}`, -1},
	} {
		var c chunkJSON
		c.reset()
		p := chunkParser{b: []byte(tc.json)}
		if !p.chunk(&c) || c.Usage == nil || c.Usage.PromptTokens == nil || *c.Usage.PromptTokens != tc.want {
			t.Errorf("%q: scanned %+v, want prompt_tokens %d", tc.json, c.Usage, tc.want)
		}
	}
	var c chunkJSON
	if !c.decode([]byte(`{"ID":"upper","id":"x"}`)) || string(c.ID) != `"x"` {
		t.Errorf("case-insensitive keys: id %s", c.ID)
	}
}

// BenchmarkChunkDecode is one typical content chunk decoded by the
// scanner; /encoding-json is the naive twin (what the layer did before).
func BenchmarkChunkDecode(b *testing.B) {
	data := []byte(benchChunk[len("data: ") : len(benchChunk)-2])
	b.Run("scanner", func(b *testing.B) {
		var c chunkJSON
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if !c.decode(data) || c.contentChoices() != 1 {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var c chunkJSON
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			c.reset()
			if json.Unmarshal(data, &c) != nil || c.contentChoices() != 1 {
				b.Fatal("not decoded")
			}
		}
	})
}
