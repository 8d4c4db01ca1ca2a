package transport

import (
	"bytes"
	"errors"
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

// FuzzParseUpdate: any line parses to an update or a typed rejection, never
// a panic; what parses re-encodes (AppendUpdateJSON) to a line that parses
// back to the same update.
func FuzzParseUpdate(f *testing.F) {
	f.Add([]byte(`{"request_id":"r1","type":"ARRIVED","ts":1700000000.0,"model":"llama-3-8b","operation":"chat"}`))
	f.Add([]byte(`{"request_id":"r1","type":"INPUT_PROCESSED","ts":1700000000.002,"num_prompt_tokens":512,"sampling_params":{"temperature":0.7,"max_tokens":256,"stop":["\n"]}}`))
	f.Add([]byte(`{"request_id":"r1","type":3,"ts":1700000000.010,"num_computed_tokens":512,"num_cached_tokens":128}`))
	f.Add([]byte(`{"request_id":"r1","type":"DETOKENIZED","ts":1700000000.051,"num_new_tokens":1,"busy_time_s":0.0002}`))
	f.Add([]byte(`{"request_id":"r1","type":"FINISHED","ts":1700000000.300,"side":"engine","finish_reason":"stop","error_type":"x"}`))
	f.Add([]byte(`{"request_id":"r1","type":"decoding","ts":1.5e9,"top_p":0.9}`))
	// Control characters, which Go's quoting wrote as no JSON reads them.
	f.Add([]byte(`{"request_id":"r\u0001\u007f","type":"ARRIVED","ts":1700000000,"model":"m\u0007\udb40\udc01"}`))
	// Python's json.dumps: NaN and Infinity literals, counts as floats,
	// null for an unset field, paired and lone surrogate escapes.
	f.Add([]byte(`{"request_id": "r\ud83d\ude00", "type": 5.0, "ts": 1700000000.5, "num_new_tokens": 2.0, "scope": null, "temperature": NaN}`))
	f.Add([]byte(`{"request_id": "r", "type": "DETOKENIZED", "ts": Infinity, "num_new_tokens": 1e1, "busy_time_s": -Infinity, "model": "NaN\"Infinity"}`))
	for _, c := range badLines() {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		u, err := ParseUpdate(line)
		if err != nil {
			var re *otelstats.RejectError
			if !errors.As(err, &re) || !errors.Is(err, otelstats.ErrRejected) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !u.Kind.Valid() || u.RequestID == "" || u.Time.IsZero() {
			t.Fatalf("accepted an invalid update %+v", u)
		}
		out := AppendUpdateJSON(nil, &u)
		v, err := ParseUpdate(bytes.TrimSpace(out))
		if err != nil {
			t.Fatalf("re-encoded line %s does not parse: %v", out, err)
		}
		// Payload a kind does not use (num_cached_tokens on QUEUED) is
		// validated but ignored, and not re-encoded.
		u, v = relevant(u), relevant(v)
		if v.RequestID != u.RequestID || v.Kind != u.Kind || !v.Time.Equal(u.Time) || v.NumPromptTokens != u.NumPromptTokens ||
			v.NumComputedTokens != u.NumComputedTokens || v.NumCachedTokens != u.NumCachedTokens ||
			v.FinishReason != u.FinishReason || v.Model != u.Model {
			t.Fatalf("round trip changed the update:\n%+v\n%+v", u, v)
		}
	})
}

// relevant keeps the payload fields u's kind uses.
func relevant(u otelstats.Update) otelstats.Update {
	if u.Kind != otelstats.KindPrefilling {
		u.NumComputedTokens, u.NumCachedTokens = 0, 0
	}
	if u.Kind != otelstats.KindInputProcessed && u.Kind != otelstats.KindFinished {
		u.NumPromptTokens = 0
	}
	if u.Kind != otelstats.KindFinished {
		u.FinishReason, u.ErrorType = "", ""
	}
	return u
}
