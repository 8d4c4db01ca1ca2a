package openaihttp

import "testing"

// vLLM reads stream and stream_options.include_usage with pydantic's lax
// bool rules: true/false, 0/1 (and 0.0/1.0), and the strings "true",
// "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n" in any
// case. The layer reads them as vLLM does; anything else (which vLLM
// rejects) is false.
func TestParseRequestLaxBool(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{`true`, true}, {`false`, false}, {`null`, false},
		{`"true"`, true}, {`"True"`, true}, {`"TRUE"`, true}, {`"1"`, true}, {`"yes"`, true}, {`"on"`, true}, {`"t"`, true}, {`"Y"`, true},
		{`"false"`, false}, {`"0"`, false}, {`"no"`, false}, {`"off"`, false}, {`"f"`, false}, {`"N"`, false},
		{`1`, true}, {`0`, false}, {`1.0`, true}, {`0.0`, false}, {`1e0`, true},
		{`2`, false}, {`-1`, false}, {`0.5`, false}, {`"2"`, false}, {`"tru"`, false}, {`" true"`, false}, {`""`, false},
		{`"\u0074rue"`, true}, {`[]`, false}, {`{}`, false},
	} {
		got := parseRequest([]byte(`{"model":"m","stream":` + c.v + `,"stream_options":{"include_usage":` + c.v + `}}`))
		if got.Stream != c.want || got.IncludeUsage != c.want {
			t.Errorf("stream and include_usage %s: read %v, %v; want %v", c.v, got.Stream, got.IncludeUsage, c.want)
		}
	}
}

// vLLM reads n, max_tokens and seed with pydantic's lax int rules: an
// integer, a float without a fraction, or a string holding one. "n":"2"
// is two choices to vLLM, so a stream is whole only when both finished.
func TestParseRequestLaxInt(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int64 // 0: not read
	}{
		{`2`, 2}, {`2.0`, 2}, {`2e0`, 2}, {`"2"`, 2}, {`" 2 "`, 2}, {`"2.0"`, 2},
		{`2.5`, 0}, {`"2.5"`, 0}, {`"two"`, 0}, {`"\u0032"`, 0}, {`null`, 0}, {`true`, 0}, {`""`, 0}, {`1e300`, 0},
	} {
		got := parseRequest([]byte(`{"model":"m","n":` + c.v + `,"max_tokens":` + c.v + `,"seed":` + c.v + `}`)).Sampling
		for name, p := range map[string]*int64{"n": got.N, "max_tokens": got.MaxTokens, "seed": got.Seed} {
			if (p == nil) != (c.want == 0) || (p != nil && *p != c.want) {
				t.Errorf("%s %s: read %v, want %d", name, c.v, p, c.want)
			}
		}
	}
}
