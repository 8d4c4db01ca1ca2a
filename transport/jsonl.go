package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/llmtrace/llmtrace/internal/jsonstr"
	"github.com/llmtrace/llmtrace/internal/unixsec"
	"github.com/llmtrace/llmtrace/otelstats"
)

// The update log is how engines in any language hand us their updates: one
// JSON object per line, with vLLM's RequestStatsUpdate field names.
//
//	{"request_id":"r1","type":"ARRIVED","ts":1700000000.0,"model":"llama-3-8b","operation":"chat"}
//	{"request_id":"r1","type":"INPUT_PROCESSED","ts":1700000000.002,"num_prompt_tokens":512,"sampling_params":{"temperature":0.7,"max_tokens":256}}
//	{"request_id":"r1","type":"QUEUED","ts":1700000000.003,"side":"engine"}
//	{"request_id":"r1","type":"PREFILLING","ts":1700000000.010,"num_computed_tokens":512,"num_cached_tokens":128}
//	{"request_id":"r1","type":"DECODING","ts":1700000000.050,"num_new_tokens":1}
//	{"request_id":"r1","type":"DETOKENIZED","ts":1700000000.051,"num_new_tokens":1,"busy_time_s":0.0002}
//	{"request_id":"r1","type":"FINISHED","ts":1700000000.300,"side":"engine","finish_reason":"stop"}
//	{"request_id":"r1","type":"FINISHED","ts":1700000000.301,"finish_reason":"stop"}
//
// Fields: request_id (string, required); type (the kind's name, any case, or
// vLLM's integer 0–7 for the first eight); ts (Unix seconds, required); side
// ("frontend" or "engine"; default from the kind, frontend for FINISHED —
// on a Collector's stream whose HELLO named a side, FINISHED defaults to
// that side);
// model, operation, scope; num_prompt_tokens (required on INPUT_PROCESSED;
// optional on FINISHED); num_computed_tokens and num_cached_tokens (required
// on PREFILLING); num_new_tokens (required on DETOKENIZED, default 1 on
// DECODING, num_accepted_tokens + 1 on a speculative one); busy_time_s;
// finish_reason (required on FINISHED); error_type; num_output_tokens
// (optional on the frontend's FINISHED: an output delivered in one piece);
// sampling params either nested in "sampling_params" or at the top level
// (temperature, top_p, top_k, max_tokens, seed, n, frequency_penalty,
// presence_penalty, stop). SPEC
// §7–9 add pd_role and lora_adapter (ARRIVED); kv_source (required) and
// num_remote_tokens (REMOTE_KV_WAIT); num_remote_tokens (required), kv_bytes
// and kv_status (REMOTE_KV_READY); num_draft_tokens and num_accepted_tokens
// (DECODING, both or neither); num_items (required) and num_encoder_tokens
// (ENCODING); encoder_cache_hit (ENCODED); traceparent and tracestate
// (ARRIVED: the W3C trace context the request came with, e.g. a P/D
// router's, so the request's trace joins it). Unknown fields are ignored.
type logLine struct {
	RequestID         json.RawMessage `json:"request_id"`
	Type              json.RawMessage `json:"type"`
	TS                *json.Number    `json:"ts"`
	Side              *string         `json:"side"`
	Model             *string         `json:"model"`
	Operation         *string         `json:"operation"`
	Scope             json.RawMessage `json:"scope"`
	NumPromptTokens   *json.Number    `json:"num_prompt_tokens"`
	NumComputedTokens *json.Number    `json:"num_computed_tokens"`
	NumCachedTokens   *json.Number    `json:"num_cached_tokens"`
	NumNewTokens      *json.Number    `json:"num_new_tokens"`
	NumOutputTokens   *json.Number    `json:"num_output_tokens"`
	BusyTimeS         *float64        `json:"busy_time_s"`
	FinishReason      *string         `json:"finish_reason"`
	ErrorType         *string         `json:"error_type"`
	SamplingParams    *samplingJSON   `json:"sampling_params"`
	// SPEC §7–9.
	PDRole            *string      `json:"pd_role"`
	KVSource          *string      `json:"kv_source"`
	NumRemoteTokens   *json.Number `json:"num_remote_tokens"`
	KVBytes           *json.Number `json:"kv_bytes"`
	KVStatus          *string      `json:"kv_status"`
	NumDraftTokens    *json.Number `json:"num_draft_tokens"`
	NumAcceptedTokens *json.Number `json:"num_accepted_tokens"`
	LoRAAdapter       *string      `json:"lora_adapter"`
	NumItems          *json.Number `json:"num_items"`
	NumEncoderTokens  *json.Number `json:"num_encoder_tokens"`
	EncoderCacheHit   *bool        `json:"encoder_cache_hit"`
	// Traceparent (and Tracestate), on ARRIVED: the W3C trace context the
	// request came with (Update.Parent).
	Traceparent *string `json:"traceparent"`
	Tracestate  *string `json:"tracestate"`
	topLevelSampling
}

// topLevelSampling are sampling params given at the top level of a line.
type topLevelSampling = samplingJSON

// samplingJSON are sampling params as the update log and the binary
// encoding's JSON field carry them: otelstats.SamplingParams, whose stop
// may also be one string, as vLLM's SamplingParams.stop and OpenAI's API
// allow ("stop": "\n"), and whose integers may be written as floats with
// an integer value ("max_tokens": 16.0), as counts may; such a line was
// refused whole as malformed.
type samplingJSON struct {
	otelstats.SamplingParams
	Stop      stopJSON `json:"stop"`
	TopK      *intJSON `json:"top_k"`
	MaxTokens *intJSON `json:"max_tokens"`
	Seed      *intJSON `json:"seed"`
	N         *intJSON `json:"n"`
}

// params is p as the tracker takes it, nil when p sets nothing.
func (p *samplingJSON) params() *otelstats.SamplingParams {
	if p == nil {
		return nil
	}
	sp := p.SamplingParams
	sp.Stop = p.Stop
	sp.TopK, sp.MaxTokens, sp.Seed, sp.N = (*int64)(p.TopK), (*int64)(p.MaxTokens), (*int64)(p.Seed), (*int64)(p.N)
	if sp.IsZero() {
		return nil
	}
	return &sp
}

// intJSON is an integer sampling param, read as parseInt reads a count.
type intJSON int64

func (n *intJSON) UnmarshalJSON(b []byte) error {
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return err
	}
	v, err := parseInt(num.String())
	if err != nil {
		return fmt.Errorf("sampling param %s: %w", truncate(num.String(), 32), err)
	}
	*n = intJSON(v)
	return nil
}

// stopJSON is a list of stop sequences, or one.
type stopJSON []string

func (s *stopJSON) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return json.Unmarshal(b, (*[]string)(s))
	}
	var one string
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*s = stopJSON{one}
	return nil
}

// utf8BOM is the byte order mark Windows editors write at a file's start.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// ParseUpdate parses one line of the update log. A line that is not a valid
// update returns a *otelstats.RejectError (reason malformed,
// missing_payload, …) with whatever of request id and kind could be read.
func ParseUpdate(line []byte) (otelstats.Update, error) {
	var u otelstats.Update
	var l logLine
	line = finiteJSON(bytes.TrimSpace(bytes.TrimPrefix(line, utf8BOM)))
	if len(line) == 0 || line[0] != '{' {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: "not a JSON object"}
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&l); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: trimErr(err)}
		}
		if err := decodeRead(line, &l); err != nil {
			_ = parseIdentity(&l, &u) // the request and kind, where they could be read
			return u, reject(&u, u.Side, otelstats.ReasonMalformed, trimErr(err))
		}
	}
	if d.InputOffset() != int64(len(line)) {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: "more than one JSON value on the line"}
	}
	for _, step := range [...]func(*logLine, *otelstats.Update) *otelstats.RejectError{
		parseIdentity, parseTime, parseStrings, parseCounts, parsePayloadRules,
	} {
		if rerr := step(&l, &u); rerr != nil {
			return u, rerr
		}
	}
	if u.Sampling = l.SamplingParams.params(); u.Sampling == nil {
		u.Sampling = l.topLevelSampling.params()
	}
	capStrings(&u)
	return u, nil
}

// decodeRead decodes line into l again without the fields l's kind does
// not read (readBy), after a field of the wrong type failed the first
// decoding: such a field fails only what reads it, as the tracker ignores
// an Update's fields its kind does not use. Decoding, the decoder went on
// past the bad field, so l's type is there. It returns the error of a
// field the kind reads.
func decodeRead(line []byte, l *logLine) error {
	k, err := parseKind(l.Type)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return err
	}
	for name := range fields {
		if !readBy(strings.ToLower(name), k) { // names match in any case
			delete(fields, name)
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	*l = logLine{}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(l)
}

// readBy reports whether kind k reads the update log's field: the tracker
// ignores the field on any other kind, and so does the reader, whatever
// it holds. A field not listed (request_id, type, ts, side, model, scope)
// is read by every kind.
func readBy(field string, k otelstats.Kind) bool {
	switch field {
	case "num_prompt_tokens":
		return k == otelstats.KindInputProcessed || k == otelstats.KindFinished
	case "num_computed_tokens", "num_cached_tokens":
		return k == otelstats.KindPrefilling
	case "num_new_tokens":
		return k == otelstats.KindDetokenized || k == otelstats.KindDecoding
	case "num_output_tokens", "finish_reason", "error_type":
		return k == otelstats.KindFinished
	case "num_remote_tokens":
		return k == otelstats.KindRemoteKVWait || k == otelstats.KindRemoteKVReady
	case "kv_bytes", "kv_status":
		return k == otelstats.KindRemoteKVReady
	case "kv_source":
		return k == otelstats.KindRemoteKVWait
	case "num_draft_tokens", "num_accepted_tokens":
		return k == otelstats.KindDecoding
	case "num_items", "num_encoder_tokens":
		return k == otelstats.KindEncoding
	case "encoder_cache_hit":
		return k == otelstats.KindEncoded
	case "busy_time_s":
		return k == otelstats.KindDetokenized
	case "operation", "pd_role", "lora_adapter", "traceparent", "tracestate":
		return k == otelstats.KindArrived
	case "sampling_params", "temperature", "top_p", "top_k", "max_tokens", "seed", "n",
		"frequency_penalty", "presence_penalty", "stop":
		return k == otelstats.KindInputProcessed
	}
	return true
}

// nonFinite are the number literals Python's json.dumps writes by default
// (allow_nan) for a float that is no number, and JSON has not; "-Infinity"
// before "Infinity".
var nonFinite = [...][]byte{[]byte("-Infinity"), []byte("Infinity"), []byte("NaN")}

// finiteJSON returns line with each NaN, Infinity and -Infinity outside a
// string read as null: a field holding one is absent, so an optional one
// (busy_time_s, a sampling param) is not set and a required one is
// reported missing, where the one literal made the whole line malformed,
// without even its request id. Lines without them are returned as they
// are.
func finiteJSON(line []byte) []byte {
	if !bytes.Contains(line, nonFinite[1]) && !bytes.Contains(line, nonFinite[2]) {
		return line
	}
	var out []byte
	last := 0
	inString, escaped := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case inString:
			inString = escaped || c != '"'
			escaped = !escaped && c == '\\'
			continue
		case c == '"':
			inString = true
			continue
		}
		for _, lit := range nonFinite {
			if bytes.HasPrefix(line[i:], lit) {
				out = append(append(out, line[last:i]...), "null"...)
				i += len(lit) - 1
				last = i + 1
				break
			}
		}
	}
	if out == nil {
		return line
	}
	return append(out, line[last:]...)
}

// parseIdentity reads the request id, the kind and the side.
func parseIdentity(l *logLine, u *otelstats.Update) *otelstats.RejectError {
	if len(l.RequestID) == 0 || string(l.RequestID) == "null" {
		return &otelstats.RejectError{Reason: otelstats.ReasonMissingRequestID}
	}
	if rerr := parseID(l.RequestID, &u.RequestID, "request_id"); rerr != nil {
		return rerr
	}
	if u.RequestID == "" {
		return &otelstats.RejectError{Reason: otelstats.ReasonMissingRequestID}
	}
	if len(u.RequestID) > otelstats.MaxIDLength {
		return reject(u, otelstats.SideAuto, otelstats.ReasonTooLong, "request id longer than "+strconv.Itoa(otelstats.MaxIDLength)+" bytes")
	}
	if len(l.Scope) > 0 && string(l.Scope) != "null" {
		if rerr := parseID(l.Scope, &u.Scope, "scope"); rerr != nil {
			rerr.RequestID = u.RequestID
			return rerr
		}
	}
	k, err := parseKind(l.Type)
	if err != nil {
		return reject(u, otelstats.SideAuto, otelstats.ReasonUnknownKind, err.Error())
	}
	u.Kind = k
	if l.Side != nil {
		s, ok := otelstats.ParseSide(*l.Side)
		if !ok {
			return reject(u, u.Side, otelstats.ReasonWrongSide, "side must be frontend or engine")
		}
		u.Side = s
	}
	return nil
}

// parseID reads an identity (the request id, the scope) from its JSON
// string. One that is not UTF-8 is refused: encoding/json would replace
// its invalid bytes, or a lone surrogate escape ("\ud800", which Python's
// json.dumps writes for a string that holds one), with U+FFFD, and two
// identities that differ there would become one request.
func parseID(raw json.RawMessage, dst *string, name string) *otelstats.RejectError {
	if err := json.Unmarshal(raw, dst); err != nil {
		return &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: name + " must be a string"}
	}
	if !utf8.Valid(raw) || !pairedSurrogates(raw) {
		*dst = ""
		return &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: name + " is not UTF-8"}
	}
	return nil
}

// pairedSurrogates reports whether every surrogate escape of the JSON
// string raw is half of a pair, high then low, as encoding/json needs to
// decode it as written.
func pairedSurrogates(raw []byte) bool {
	high := false // the previous character was a high surrogate escape
	for i := 0; i < len(raw); i++ {
		r := rune(-1) // no \u escape
		if raw[i] == '\\' {
			if i+5 < len(raw) && raw[i+1] == 'u' {
				if v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16); err == nil {
					r = rune(v)
				}
				i += 4
			}
			i++ // an escape's digits or escaped character are no escapes
		}
		switch {
		case r >= 0xD800 && r < 0xDC00 && !high:
			high = true
		case r >= 0xDC00 && r < 0xE000 && high:
			high = false
		case high || (r >= 0xD800 && r < 0xE000):
			return false
		}
	}
	return !high
}

func parseTime(l *logLine, u *otelstats.Update) *otelstats.RejectError {
	if l.TS == nil {
		return reject(u, u.Side, otelstats.ReasonBadTimestamp, "ts is required")
	}
	tsv, ok := parseTS(l.TS.String())
	if !ok {
		return reject(u, u.Side, otelstats.ReasonBadTimestamp, "ts must be Unix seconds between 1970 and 2200")
	}
	u.Time = tsv
	return nil
}

func parseStrings(l *logLine, u *otelstats.Update) *otelstats.RejectError {
	for _, f := range [...]struct {
		dst *string
		src *string
	}{
		{&u.Model, l.Model}, {&u.Operation, l.Operation},
		{&u.FinishReason, l.FinishReason}, {&u.ErrorType, l.ErrorType},
		{&u.PDRole, l.PDRole}, {&u.KVSource, l.KVSource}, {&u.KVStatus, l.KVStatus}, {&u.LoRAAdapter, l.LoRAAdapter},
	} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	if l.EncoderCacheHit != nil {
		u.EncoderCacheHit = *l.EncoderCacheHit
	}
	if l.Traceparent != nil {
		var ts string
		if l.Tracestate != nil {
			ts = *l.Tracestate
		}
		var ok bool
		if u.Parent, ok = parseParent(*l.Traceparent, ts); !ok {
			return reject(u, u.Side, otelstats.ReasonMalformed, "traceparent is not a W3C trace context")
		}
	}
	return nil
}

// parseCounts reads the counts: integers from 0 to 2^30, the ones the kind
// requires present.
func parseCounts(l *logLine, u *otelstats.Update) *otelstats.RejectError {
	k := u.Kind
	for _, f := range [...]struct {
		dst  *int
		src  *json.Number
		name string
		need otelstats.Kind
	}{
		{&u.NumPromptTokens, l.NumPromptTokens, "num_prompt_tokens", otelstats.KindInputProcessed},
		{&u.NumComputedTokens, l.NumComputedTokens, "num_computed_tokens", otelstats.KindPrefilling},
		{&u.NumCachedTokens, l.NumCachedTokens, "num_cached_tokens", otelstats.KindPrefilling},
		{&u.NumNewTokens, l.NumNewTokens, "num_new_tokens", otelstats.KindDetokenized},
		{&u.NumOutputTokens, l.NumOutputTokens, "num_output_tokens", 0},
		{&u.NumRemoteTokens, l.NumRemoteTokens, "num_remote_tokens", otelstats.KindRemoteKVReady},
		{&u.NumDraftTokens, l.NumDraftTokens, "num_draft_tokens", 0},
		{&u.NumAcceptedTokens, l.NumAcceptedTokens, "num_accepted_tokens", 0},
		{&u.NumItems, l.NumItems, "num_items", otelstats.KindEncoding},
		{&u.NumEncoderTokens, l.NumEncoderTokens, "num_encoder_tokens", 0},
	} {
		if f.src == nil {
			if f.need == k {
				return reject(u, u.Side, otelstats.ReasonMissingPayload, f.name+" is required on "+k.String())
			}
			continue
		}
		if !readBy(f.name, k) {
			// Ignored, whatever it holds: rejected, one stray count
			// lost the update (an ARRIVED, the whole request).
			continue
		}
		n, rerr := parseCount(u, f.src, f.name, otelstats.MaxTokenCount)
		if rerr != nil {
			return rerr
		}
		*f.dst = int(n)
	}
	if l.KVBytes != nil && readBy("kv_bytes", k) {
		n, rerr := parseCount(u, l.KVBytes, "kv_bytes", 1<<50)
		if rerr != nil {
			return rerr
		}
		u.KVBytes = n
	}
	return nil
}

// parseCount reads one count of at most limit.
func parseCount(u *otelstats.Update, src *json.Number, name string, limit int64) (int64, *otelstats.RejectError) {
	n, err := parseInt(src.String())
	switch {
	case errors.Is(err, strconv.ErrRange):
		if n < 0 {
			return 0, reject(u, u.Side, otelstats.ReasonNegativeCount, name+" is "+truncate(src.String(), 32))
		}
		return 0, reject(u, u.Side, otelstats.ReasonAbsurdCount, name+" is "+truncate(src.String(), 32))
	case err != nil:
		return 0, reject(u, u.Side, otelstats.ReasonMalformed, name+" must be an integer")
	case n < 0:
		return 0, reject(u, u.Side, otelstats.ReasonNegativeCount, name+" is "+strconv.FormatInt(n, 10))
	case n > limit:
		return 0, reject(u, u.Side, otelstats.ReasonAbsurdCount, name+" is "+strconv.FormatInt(n, 10))
	}
	return n, nil
}

// errFraction: a number with a fractional part where an integer belongs.
var errFraction = errors.New("not an integer")

// parseInt reads a JSON number that must be an integer, also one written
// as a float with an integer value ("12.0", "1.2e1"): pandas' to_json
// writes a count column so once it holds a null, and a producer may count
// in floating point; such a line was refused whole. Every limit is far
// below 2^53, where float64 is exact. Past int64 the value saturates,
// with strconv.ErrRange; a fraction is errFraction.
func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil || errors.Is(err, strconv.ErrRange) {
		return n, err
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, err
	case f != math.Trunc(f):
		return 0, errFraction
	case f >= math.MaxInt64:
		return math.MaxInt64, strconv.ErrRange
	case f < math.MinInt64:
		return math.MinInt64, strconv.ErrRange
	}
	return int64(f), nil
}

// parsePayloadRules checks what the line format itself requires; the
// tracker checks the rest.
func parsePayloadRules(l *logLine, u *otelstats.Update) *otelstats.RejectError {
	k := u.Kind
	switch {
	case k == otelstats.KindDecoding && l.NumNewTokens != nil && u.NumNewTokens == 0:
		return reject(u, u.Side, otelstats.ReasonMissingPayload, "DECODING with num_new_tokens 0")
	case readBy("num_draft_tokens", k) && (l.NumDraftTokens == nil) != (l.NumAcceptedTokens == nil):
		return reject(u, u.Side, otelstats.ReasonDraftWithoutAccepted, "num_draft_tokens and num_accepted_tokens go together")
	case k == otelstats.KindFinished && u.FinishReason == "":
		return reject(u, u.Side, otelstats.ReasonMissingPayload, "finish_reason is required on FINISHED")
	case k == otelstats.KindArrived && u.Model == "":
		return reject(u, u.Side, otelstats.ReasonMissingPayload, "model is required on ARRIVED")
	case k == otelstats.KindRemoteKVWait && u.KVSource == "":
		return reject(u, u.Side, otelstats.ReasonMissingPayload, "kv_source is required on REMOTE_KV_WAIT")
	}
	if l.BusyTimeS != nil && readBy("busy_time_s", k) {
		b := *l.BusyTimeS
		switch {
		case b < 0:
			return reject(u, u.Side, otelstats.ReasonNegativeCount, "busy_time_s is negative")
		case b > 1e6: // past it, nanoseconds could leave int64
			return reject(u, u.Side, otelstats.ReasonAbsurdCount, "busy_time_s out of range")
		}
		u.Busy = time.Duration(b * 1e9)
	}
	return nil
}

// parseTS reads Unix seconds exactly from the JSON number's text, so
// "1700000000.301" is 301 ms past the second, not the nearest float64.
func parseTS(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > float64(maxTS) {
		return time.Time{}, false
	}
	intPart, frac, ok := splitDecimal(s)
	if !ok {
		sec := math.Floor(f)
		return time.Unix(int64(sec), int64(math.Round((f-sec)*1e9))).UTC(), true
	}
	sec, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var ns int64
	for i := 0; i < 9; i++ {
		ns *= 10
		if i < len(frac) {
			ns += int64(frac[i] - '0')
		}
	}
	return time.Unix(sec, ns).UTC(), true
}

// splitDecimal splits a positive JSON number's text into the digits
// before and after its decimal point, an exponent applied by moving the
// point: "1.700000000301e9" is "1700000000" and "301". ok is false for a
// form it does not take apart (a sign, an exponent beyond ±30).
func splitDecimal(s string) (intPart, frac string, ok bool) {
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e < -30 || e > 30 {
			return "", "", false
		}
		mant, exp = s[:i], e
	}
	if strings.ContainsAny(mant, "+-") {
		return "", "", false
	}
	ip, fp, _ := strings.Cut(mant, ".")
	digits, point := ip+fp, len(ip)+exp
	switch {
	case point <= 0:
		return "0", strings.Repeat("0", -point) + digits, true
	case point >= len(digits):
		return digits + strings.Repeat("0", point-len(digits)), "", true
	}
	return digits[:point], digits[point:], true
}

func parseKind(raw json.RawMessage) (otelstats.Kind, error) {
	if len(raw) == 0 {
		return 0, errString("type is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if k, ok := otelstats.ParseKind(s); ok {
			return k, nil
		}
		return 0, errString("unknown type " + strconv.Quote(truncate(s, 32)))
	}
	var num json.Number
	if json.Unmarshal(raw, &num) == nil {
		if n, err := parseInt(num.String()); err == nil && n >= 0 && n <= 7 {
			return otelstats.Kind(n + 1), nil // vLLM's IntEnum starts at ARRIVED = 0
		}
	}
	return 0, errString("type must be a kind name or vLLM's integer 0-7")
}

type errString string

func (e errString) Error() string { return string(e) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func trimErr(err error) string { return truncate(err.Error(), 120) }

// RecordLine parses one update-log line and records it in t. A line that
// does not parse is rejected and counted in t like any other bad update.
func RecordLine(t *otelstats.Tracker, line []byte) error {
	u, err := ParseUpdate(line)
	if err != nil {
		return t.Reject(err.(*otelstats.RejectError))
	}
	return t.Record(u)
}

// AppendUpdateJSON appends u as one update-log line (with a trailing
// newline) to dst; ParseUpdate reads it back.
func AppendUpdateJSON(dst []byte, u *otelstats.Update) []byte {
	w := jsonWriter(dst)
	w = append(w, `{"request_id":`...)
	w = jsonstr.Append(w, u.RequestID, true)
	w = append(w, `,"type":"`...)
	w = append(w, u.Kind.String()...)
	w = append(w, `","ts":`...)
	w = unixsec.Append(w, u.Time)
	if u.Side != otelstats.SideAuto {
		w.str("side", u.Side.String())
	}
	if u.Scope != "" {
		// An identity, as the id: refused rather than read as another.
		w.key("scope")
		w = jsonstr.Append(w, u.Scope, true)
	}
	for _, f := range [...]struct{ k, v string }{
		{"model", u.Model}, {"operation", u.Operation},
		{"pd_role", u.PDRole}, {"lora_adapter", u.LoRAAdapter}, {"kv_source", u.KVSource}, {"kv_status", u.KVStatus},
	} {
		w.str(f.k, f.v)
	}
	// A count is written when the kind needs it or it is positive; a
	// negative one too where the kind uses it, so that the reader rejects
	// it as the tracker would (left out, it was read as absent and the
	// update taken). Elsewhere the tracker ignores it, and so must the
	// reader.
	k := u.Kind
	w.num("num_prompt_tokens", u.NumPromptTokens, k == otelstats.KindInputProcessed || given(u.NumPromptTokens, "num_prompt_tokens", k))
	w.num("num_computed_tokens", u.NumComputedTokens, k == otelstats.KindPrefilling)
	w.num("num_cached_tokens", u.NumCachedTokens, k == otelstats.KindPrefilling)
	// A speculative step without a count is left without one: the
	// reader's default is then the tracker's, accepted + 1; a written 1
	// would be taken as given and rejected (accepted ≤ num_new_tokens).
	spec := specCounts(u)
	newTokens := u.NumNewTokens
	if newTokens == 0 {
		newTokens = 1
	}
	w.num("num_new_tokens", newTokens, k == otelstats.KindDecoding && (u.NumNewTokens != 0 || !spec))
	w.num("num_new_tokens", u.NumNewTokens, k == otelstats.KindDetokenized)
	w.num("num_output_tokens", u.NumOutputTokens, given(u.NumOutputTokens, "num_output_tokens", k))
	w.num("num_remote_tokens", u.NumRemoteTokens, k == otelstats.KindRemoteKVReady || given(u.NumRemoteTokens, "num_remote_tokens", k))
	w.num("kv_bytes", int(u.KVBytes), given(u.KVBytes, "kv_bytes", k))
	w.num("num_draft_tokens", u.NumDraftTokens, spec)
	w.num("num_accepted_tokens", u.NumAcceptedTokens, spec)
	w.num("num_items", u.NumItems, k == otelstats.KindEncoding || u.NumItems > 0)
	w.num("num_encoder_tokens", u.NumEncoderTokens, given(u.NumEncoderTokens, "num_encoder_tokens", k))
	if u.EncoderCacheHit {
		w = append(w, `,"encoder_cache_hit":true`...)
	}
	if given(u.Busy, "busy_time_s", k) {
		w = append(w, `,"busy_time_s":`...)
		w = strconv.AppendFloat(w, u.Busy.Seconds(), 'g', -1, 64)
	}
	w.str("finish_reason", u.FinishReason)
	w.str("error_type", u.ErrorType)
	if u.Parent.IsValid() {
		tp, ts := formatParent(u.Parent)
		w.str("traceparent", tp)
		w.str("tracestate", ts)
	}
	if !u.Sampling.IsZero() {
		b, _ := json.Marshal(u.Sampling)
		w = append(w, `,"sampling_params":`...)
		w = append(w, b...)
	}
	return append(w, '}', '\n')
}

// given reports whether count v of the update-log field name is written
// on kind k: when it is positive, or negative where k reads the field
// (readBy, which the reader follows), for the tracker to reject.
func given[N int | int64 | time.Duration](v N, name string, k otelstats.Kind) bool {
	return v > 0 || v < 0 && readBy(name, k)
}

// specCounts reports whether u's num_draft_tokens and num_accepted_tokens
// are written, both or neither (SPEC §8): when either is not 0 on a
// DECODING (accepted tokens without a draft too, for the tracker to
// reject: accepted ≤ draft), or when neither is negative and one positive
// on a kind that does not use them.
func specCounts(u *otelstats.Update) bool {
	d, a := u.NumDraftTokens, u.NumAcceptedTokens
	if readBy("num_draft_tokens", u.Kind) {
		return d != 0 || a != 0
	}
	return d >= 0 && a >= 0 && (d > 0 || a > 0)
}

// jsonWriter appends an update-log line's fields.
type jsonWriter []byte

func (w *jsonWriter) key(k string) {
	*w = append(*w, ',', '"')
	*w = append(*w, k...)
	*w = append(*w, '"', ':')
}

func (w *jsonWriter) str(k, v string) {
	if v != "" {
		w.key(k)
		*w = jsonstr.Append(*w, v, false)
	}
}

func (w *jsonWriter) num(k string, v int, on bool) {
	if on {
		w.key(k)
		*w = strconv.AppendInt(*w, int64(v), 10)
	}
}

// reject is a rejection of u found while decoding, before any tracker saw
// it; the request id is cut to the longest a tracker accepts.
func reject(u *otelstats.Update, side otelstats.Side, r otelstats.Reason, detail string) *otelstats.RejectError {
	id := u.RequestID
	if len(id) > otelstats.MaxIDLength {
		id = id[:otelstats.MaxIDLength]
	}
	return &otelstats.RejectError{RequestID: id, Kind: u.Kind, Side: side, Reason: r, Detail: detail}
}

// maxTS is the latest Unix second the tracker accepts (the year 2200).
var maxTS = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
