package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// pythonLine is u as a Python producer's json.dumps of a dataclass with
// both time fields writes it: the one it does not use is null.
func pythonLine(u *otelstats.Update, mono float64, useMono bool) []byte {
	line := bytes.TrimSpace(AppendUpdateJSON(nil, u))
	if !useMono {
		return append(line[:len(line)-1], `, "mono_ts": null}`+"\n"...)
	}
	i := bytes.Index(line, []byte(`"ts":`))
	j := i + bytes.IndexByte(line[i:], ',')
	out := append([]byte{}, line[:i]...)
	out = append(out, fmt.Sprintf(`"ts": null, "mono_ts": %.9f`, mono)...)
	out = append(out, line[j:]...)
	return append(out, '\n')
}

// A line whose ts is null carries its time in mono_ts: Python's json.dumps
// writes None as null, and such lines were rejected as bad_timestamp ("ts
// is required"), so an engine's whole side of every request was lost.
func TestJSONNullTSWithMonoTS(t *testing.T) {
	e := newEnv(t, Config{})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var b bytes.Buffer
	b.WriteString(`{"type": "HELLO", "producer": "py", "wall_ts": 1700000000.0, "mono_ts": 100.0, "side": null}` + "\n")
	for _, u := range lifecycle("py1", t0) {
		engine := u.Kind == otelstats.KindQueued || u.Kind == otelstats.KindPrefilling || u.Kind == otelstats.KindDecoding
		b.Write(pythonLine(&u, 100+u.Time.Sub(t0).Seconds(), engine))
	}
	st := e.c.ServeStream(&b, "py")
	s := e.waitStat("py1")
	checkLifecycle(t, s, t0)
	checkLifecycleTimes(t, s)
	if st.Updates != 10 || st.Rejected != 0 || st.Malformed != 0 {
		t.Errorf("stream stats %+v", st)
	}
}

// A final line without its newline ("\n".join(lines)) that is a whole JSON
// object is judged as with its newline: one that breaks a rule is rejected
// for that rule, one that is no valid JSON is malformed.
// They were all counted as truncated, their reason neither logged nor in
// llm.rejected_updates, as if the stream had been cut. Only a line that
// ends inside its object is truncated.
func TestFinalLineWithoutNewline(t *testing.T) {
	for _, tc := range []struct {
		name, last                     string
		rejected, malformed, truncated int64
		reason                         otelstats.Reason
	}{
		{"breaks a rule", `{"request_id": "r", "type": "FINISHED", "ts": 1700000000.5}`, 1, 0, 0, otelstats.ReasonMissingPayload},
		{"no JSON", `{"request_id": "r", "type": "DETOKENIZED", "ts": 1700000000.5, "num_new_tokens": 1, "busy_time_s": nan}`, 0, 1, 0, otelstats.ReasonMalformed},
		{"bad HELLO", `{"type": "HELLO", "producer": "py", "wall_ts": -1}`, 0, 1, 0, otelstats.ReasonMalformed},
		{"cut short", `{"request_id": "r", "type": "FINISHED", "ts": 1700000000.5, "finish_re`, 0, 0, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []*otelstats.RejectError
			e := newEnv(t, Config{OnReject: func(re *otelstats.RejectError) { got = append(got, re) }})
			st := e.c.ServeStream(bytes.NewReader([]byte(tc.last)), "py")
			if st.Rejected != tc.rejected || st.Malformed != tc.malformed || st.Truncated != tc.truncated {
				t.Errorf("rejected %d, malformed %d, truncated %d; want %d, %d, %d",
					st.Rejected, st.Malformed, st.Truncated, tc.rejected, tc.malformed, tc.truncated)
			}
			if tc.reason != "" && e.rejected(tc.reason) != 1 {
				t.Errorf("llm.rejected_updates{%s} = %d, want 1", tc.reason, e.rejected(tc.reason))
			}
			if tc.rejected > 0 && (len(got) != 1 || got[0].Reason != tc.reason) {
				t.Errorf("OnReject saw %v, want one %s", got, tc.reason)
			}
		})
	}
}

// Identities that differ only where encoding/json would put U+FFFD — a
// lone surrogate escape, invalid UTF-8 in a scope — stay two requests:
// they are refused as malformed, as an id that is not UTF-8 was; before,
// "\ud800" and "\udc00" were both the id "\ufffd", one request. Paired
// surrogates and an escaped backslash before "u" are ordinary text.
func TestIdentitiesDecodeWhole(t *testing.T) {
	for _, tc := range []struct {
		line, id, scope string
		ok              bool
	}{
		{`{"request_id":"\ud83d\ude00","type":"QUEUED","ts":1700000000}`, "\U0001F600", "", true},
		{`{"request_id":"a\\ud800","type":"QUEUED","ts":1700000000}`, `a\ud800`, "", true},
		{`{"request_id":"a\\\ud83d\ude00\n","scope":"\u00e9\ud800\udc00","type":"QUEUED","ts":1700000000}`, "a\\\U0001F600\n", "é\U00010000", true},
		{`{"request_id":"r","scope":null,"type":"QUEUED","ts":1700000000}`, "r", "", true},
		{`{"request_id":"\ud800","type":"QUEUED","ts":1700000000}`, "", "", false},
		{`{"request_id":"\udc00","type":"QUEUED","ts":1700000000}`, "", "", false},
		{`{"request_id":"\ud800\ud800\udc00","type":"QUEUED","ts":1700000000}`, "", "", false},
		{`{"request_id":"r","scope":"\ud800","type":"QUEUED","ts":1700000000}`, "", "", false},
		{"{\"request_id\":\"r\",\"scope\":\"\xff\",\"type\":\"QUEUED\",\"ts\":1700000000}", "", "", false},
	} {
		u, err := ParseUpdate([]byte(tc.line))
		if !tc.ok {
			if !errors.Is(err, otelstats.ReasonMalformed) {
				t.Errorf("%s: %v, want malformed", tc.line, err)
			}
			continue
		}
		if err != nil || u.RequestID != tc.id || u.Scope != tc.scope {
			t.Errorf("%s: id %q scope %q, %v; want %q %q", tc.line, u.RequestID, u.Scope, err, tc.id, tc.scope)
		}
	}
}

// A field of the wrong type fails only what reads it. A HELLO whose
// wall_ts is no number (an ISO date) is a malformed HELLO; it was read as
// an update and rejected as missing_request_id. An update that also
// carries an integer "producer" (a worker index) keeps its mono_ts; it
// was rejected as bad_timestamp ("ts is required").
func TestJSONExtrasOfOtherTypes(t *testing.T) {
	var got []*otelstats.RejectError
	e := newEnv(t, Config{OnReject: func(re *otelstats.RejectError) { got = append(got, re) }})
	st := e.c.ServeStream(strings.NewReader(
		`{"type": "HELLO", "producer": "py", "wall_ts": "2023-11-14T22:13:20", "mono_ts": 100.0}`+"\n"+
			`{"type": "HELLO", "producer": "py", "wall_ts": 1700000000.0, "mono_ts": 100.0, "worker": 3}`+"\n"+
			`{"request_id": "x1", "type": "ARRIVED", "ts": 1700000000.0, "model": "m", "producer": 3}`+"\n"+
			`{"request_id": "x1", "type": "QUEUED", "mono_ts": 100.25, "producer": 3}`+"\n"+
			`{"request_id": "x1", "type": "FINISHED", "side": "engine", "mono_ts": 100.5, "producer": 3, "finish_reason": "stop"}`+"\n"), "py")
	if st.Hellos != 1 || st.Malformed != 1 || st.Updates != 3 || st.Rejected != 0 {
		t.Errorf("stream stats %+v, want 1 HELLO, 1 malformed, 3 updates", st)
	}
	s := e.waitStat("x1")
	if want := time.Unix(1_700_000_000, 5e8).UTC(); !s.FinishedTime.Equal(want) {
		t.Errorf("finished at %v, want %v", s.FinishedTime, want)
	}
	if e.rejected(otelstats.ReasonMalformed) != 1 || len(got) != 0 {
		t.Errorf("malformed %d, rejections %v; want the HELLO malformed alone", e.rejected(otelstats.ReasonMalformed), got)
	}
}

// A line of exactly MaxLine bytes ends with CRLF within the read buffer
// too, when MaxLine is the largest bound: the buffer held MaxLine+1 bytes.
func TestCRLFLineAtMaxLine(t *testing.T) {
	const maxLine = 100_000
	e := newEnv(t, Config{MaxLine: maxLine})
	head := `{"request_id":"crlf","type":"ARRIVED","ts":1700000000,"model":"m","pad":"`
	line := head + strings.Repeat("x", maxLine-len(head)-2) + `"}`
	st := e.c.ServeStream(strings.NewReader(line+"\r\n"), "win")
	if st.Updates != 1 || st.Oversized != 0 {
		t.Errorf("stream stats %+v, want the line of MaxLine bytes", st)
	}
}

// A count, or vLLM's integer type, written as a float with an integer
// value is that integer: pandas' to_json writes a count column as 12.0
// once the column holds a null, and such lines were refused whole as
// malformed ("must be an integer"). A fraction still is malformed.
func TestIntegralFloats(t *testing.T) {
	u, err := ParseUpdate([]byte(`{"request_id": "p", "type": 3.0, "ts": 1700000000.0, "num_computed_tokens": 12.0, "num_cached_tokens": 4e0}`))
	if err != nil || u.Kind != otelstats.KindPrefilling || u.NumComputedTokens != 12 || u.NumCachedTokens != 4 {
		t.Errorf("got %v %d %d, %v; want PREFILLING 12 4", u.Kind, u.NumComputedTokens, u.NumCachedTokens, err)
	}
	u, err = ParseUpdate([]byte(`{"request_id": "p", "type": "REMOTE_KV_READY", "ts": 1700000000.0, "num_remote_tokens": 1.6e1, "kv_bytes": 1048576.0}`))
	if err != nil || u.NumRemoteTokens != 16 || u.KVBytes != 1<<20 {
		t.Errorf("got %d %d, %v; want 16 1048576", u.NumRemoteTokens, u.KVBytes, err)
	}
	if _, err := ParseUpdate([]byte(`{"request_id": "p", "type": "DECODING", "ts": 1700000000.0, "num_new_tokens": 1.5}`)); !errors.Is(err, otelstats.ReasonMalformed) {
		t.Errorf("1.5 tokens: %v, want malformed", err)
	}
}

// NaN, Infinity and -Infinity, which Python's json.dumps writes by default,
// read as null outside strings: an optional field holding one is not set,
// a required one is missing. One such literal made the whole line
// malformed, its request id unknown: a frontend's FINISHED with a NaN
// busy time or temperature was lost, and its request waited for it.
func TestPythonNonFiniteNumbers(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.c.ServeStream(strings.NewReader(
		`{"type": "HELLO", "producer": "py", "wall_ts": 1700000000.0, "mono_ts": 100.0, "side": "frontend", "x": NaN}`+"\n"+
			`{"request_id": "n1", "type": "ARRIVED", "ts": 1700000000.0, "model": "NaN-Infinity \"NaN\\", "temperature": NaN}`+"\n"+
			`{"request_id": "n1", "type": "INPUT_PROCESSED", "mono_ts": 100.001, "num_prompt_tokens": 3, "sampling_params": {"temperature": Infinity, "top_p": -Infinity}}`+"\n"+
			`{"request_id": "n1", "type": "DETOKENIZED", "ts": 1700000000.01, "num_new_tokens": 1, "busy_time_s": NaN}`+"\n"+
			`{"request_id": "n1", "type": "FINISHED", "ts": 1700000000.02, "finish_reason": "stop", "num_output_tokens": NaN}`+"\n"), "py")
	if st.Hellos != 1 || st.Updates != 4 || st.Malformed != 0 || st.Rejected != 0 {
		t.Errorf("stream stats %+v, want a HELLO and four updates", st)
	}
	if s := e.waitStat("n1"); s.Model != `NaN-Infinity "NaN\` || s.NumOutputTokens != 1 {
		t.Errorf("model %q, %d tokens; want the strings untouched, one token", s.Model, s.NumOutputTokens)
	}
	for line, want := range map[string]otelstats.Reason{
		`{"request_id":"r","type":"QUEUED","ts":NaN}`:                                       otelstats.ReasonBadTimestamp,
		`{"request_id":"r","type":"DETOKENIZED","ts":1700000000,"num_new_tokens":Infinity}`: otelstats.ReasonMissingPayload,
		`{"request_id":"r","type":"QUEUED","ts":1700000000,"x":NaNa}`:                       otelstats.ReasonMalformed,
	} {
		if _, err := ParseUpdate([]byte(line)); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %s", line, err, want)
		}
	}
}

// Sampling params whose stop is one string, as vLLM's SamplingParams.stop
// and OpenAI's API allow, are read as a list of one, nested or at the top
// level of a line, and in the binary encoding's JSON field: such an
// INPUT_PROCESSED was refused whole as malformed, its prompt count lost.
func TestSamplingStopAsString(t *testing.T) {
	for _, line := range []string{
		`{"request_id": "s", "type": "INPUT_PROCESSED", "ts": 1700000000.0, "num_prompt_tokens": 3, "sampling_params": {"temperature": 0.5, "stop": "\n"}}`,
		`{"request_id": "s", "type": "INPUT_PROCESSED", "ts": 1700000000.0, "num_prompt_tokens": 3, "temperature": 0.5, "stop": "\n"}`,
	} {
		u, err := ParseUpdate([]byte(line))
		if err != nil || u.NumPromptTokens != 3 || u.Sampling == nil || len(u.Sampling.Stop) != 1 || u.Sampling.Stop[0] != "\n" || *u.Sampling.Temperature != 0.5 {
			t.Errorf("%s: %+v, %v; want stop [\"\\n\"]", line, u.Sampling, err)
		}
	}
	// A stop list alone, at the top level, is sampling params too.
	if u, err := ParseUpdate([]byte(`{"request_id": "s", "type": "INPUT_PROCESSED", "ts": 1700000000.0, "num_prompt_tokens": 3, "stop": ["a", "b"]}`)); err != nil || u.Sampling == nil || len(u.Sampling.Stop) != 2 {
		t.Errorf("top-level stop list: %+v, %v", u.Sampling, err)
	}
	b := AppendUpdate(nil, &otelstats.Update{RequestID: "s", Kind: otelstats.KindInputProcessed, NumPromptTokens: 3}, Stamp{Ns: 1})
	b = append(b, fieldSampling, 13)
	b = append(b, `{"stop":"##"}`...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if f, _, err := DecodeFrame(b, DefaultMaxFrame); err != nil || f.Update.Sampling == nil || len(f.Update.Sampling.Stop) != 1 || f.Update.Sampling.Stop[0] != "##" {
		t.Errorf("binary: %+v, %v", f.Update.Sampling, err)
	}
}

// A binary UPDATE whose request id is longer than 512 bytes is refused as
// too_long, as the update log and the tracker refuse it; the whole frame
// was counted as malformed, under another reason than the README's.
func TestBinaryLongIDTooLong(t *testing.T) {
	id := strings.Repeat("r", otelstats.MaxIDLength+1)
	b := AppendUpdate(nil, &otelstats.Update{RequestID: id, Kind: otelstats.KindQueued}, Stamp{Ns: 1_700_000_000e9})
	f, _, err := DecodeFrame(b, DefaultMaxFrame)
	if err != nil || !errors.Is(f.Reject, otelstats.ReasonTooLong) {
		t.Fatalf("decoded %v, %v; want a too_long rejection", f.Reject, err)
	}
	e := newEnv(t, Config{})
	stream := append(AppendHeader(nil), b...)
	stream = AppendUpdate(stream, &otelstats.Update{RequestID: "next", Kind: otelstats.KindArrived, Model: "m"}, Stamp{Ns: 1_700_000_000e9})
	st := e.c.ServeStream(bytes.NewReader(stream), "bin")
	if st.Rejected != 1 || st.Malformed != 0 || st.Updates != 1 || e.rejected(otelstats.ReasonTooLong) != 1 {
		t.Errorf("stream stats %+v, too_long %d; want one too_long, the next update queued", st, e.rejected(otelstats.ReasonTooLong))
	}
}

// Integer sampling params written as floats with an integer value are
// those integers, as counts are (pandas, a param computed in floating
// point); a fraction or a value past int64 still makes the line malformed.
func TestSamplingIntegralFloats(t *testing.T) {
	u, err := ParseUpdate([]byte(`{"request_id": "s", "type": "INPUT_PROCESSED", "ts": 1700000000.0, "num_prompt_tokens": 3,
		"sampling_params": {"max_tokens": 16.0, "top_k": -1.0, "seed": 42, "n": 1e0, "temperature": 0.0, "top_p": null}}`))
	if err != nil || u.Sampling == nil || *u.Sampling.MaxTokens != 16 || *u.Sampling.TopK != -1 || *u.Sampling.Seed != 42 ||
		*u.Sampling.N != 1 || *u.Sampling.Temperature != 0 || u.Sampling.TopP != nil {
		t.Errorf("%+v, %v; want max_tokens 16, top_k -1, seed 42, n 1, temperature 0", u.Sampling, err)
	}
	for _, bad := range []string{`{"max_tokens": 1.5}`, `{"seed": 1e30}`, `{"n": "x"}`} {
		line := `{"request_id": "s", "type": "INPUT_PROCESSED", "ts": 1700000000.0, "num_prompt_tokens": 3, "sampling_params": ` + bad + `}`
		if _, err := ParseUpdate([]byte(line)); !errors.Is(err, otelstats.ReasonMalformed) {
			t.Errorf("%s: %v, want malformed", bad, err)
		}
	}
}

// The binary encoding's sampling_params field is "a JSON object as in the
// update log": a Python producer writes it with json.dumps, whose NaN and
// Infinity the update log reads as absent. The binary decoder refused the
// frame as malformed, and with an ARRIVED's frame the whole request.
func TestBinarySamplingNonFinite(t *testing.T) {
	for _, js := range []string{
		`{"temperature": NaN, "max_tokens": 16}`,
		`{"temperature": Infinity, "top_p": -Infinity, "max_tokens": 16}`,
		`{"max_tokens": 16, "stop": ["NaN"], "presence_penalty": NaN}`,
	} {
		b := AppendUpdate(nil, &otelstats.Update{RequestID: "s", Kind: otelstats.KindArrived, Model: "m"}, Stamp{Ns: 1_700_000_000e9})
		b = append(b, fieldSampling, byte(len(js)))
		b = append(b, js...)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		f, _, err := DecodeFrame(b, DefaultMaxFrame)
		if err != nil || f.Reject != nil || f.Update.Sampling == nil || f.Update.Sampling.MaxTokens == nil || *f.Update.Sampling.MaxTokens != 16 ||
			f.Update.Sampling.Temperature != nil || f.Update.Sampling.TopP != nil || f.Update.Sampling.PresencePenalty != nil {
			t.Errorf("%s: %+v, %v; want max_tokens 16, the non-finite params absent", js, f.Update.Sampling, err)
		}
	}
}
