package transport

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

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
// vLLM's integer 0–7); ts (Unix seconds, required); side ("frontend" or
// "engine"; default from the kind, frontend for FINISHED); model, operation,
// scope; num_prompt_tokens (required on INPUT_PROCESSED); num_computed_tokens
// and num_cached_tokens (required on PREFILLING); num_new_tokens (required on
// DETOKENIZED, default 1 on DECODING); busy_time_s; finish_reason (required on
// FINISHED); error_type; sampling params either nested in
// "sampling_params" or at the top level (temperature, top_p, top_k,
// max_tokens, seed, n, frequency_penalty, presence_penalty, stop). Unknown
// fields are ignored.
type logLine struct {
	RequestID         json.RawMessage           `json:"request_id"`
	Type              json.RawMessage           `json:"type"`
	TS                *json.Number              `json:"ts"`
	Side              *string                   `json:"side"`
	Model             *string                   `json:"model"`
	Operation         *string                   `json:"operation"`
	Scope             *string                   `json:"scope"`
	NumPromptTokens   *json.Number              `json:"num_prompt_tokens"`
	NumComputedTokens *json.Number              `json:"num_computed_tokens"`
	NumCachedTokens   *json.Number              `json:"num_cached_tokens"`
	NumNewTokens      *json.Number              `json:"num_new_tokens"`
	BusyTimeS         *float64                  `json:"busy_time_s"`
	FinishReason      *string                   `json:"finish_reason"`
	ErrorType         *string                   `json:"error_type"`
	SamplingParams    *otelstats.SamplingParams `json:"sampling_params"`
	topLevelSampling
}

// topLevelSampling are sampling params given at the top level of a line.
type topLevelSampling = otelstats.SamplingParams

// ParseUpdate parses one line of the update log. A line that is not a valid
// update returns a *otelstats.RejectError (reason malformed, missing_payload, …) with
// whatever of request id and kind could be read.
func ParseUpdate(line []byte) (otelstats.Update, error) {
	var u otelstats.Update
	var l logLine
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&l); err != nil {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: trimErr(err)}
	}
	if d.More() {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: "more than one JSON value on the line"}
	}
	if len(l.RequestID) == 0 || string(l.RequestID) == "null" {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMissingRequestID}
	}
	if err := json.Unmarshal(l.RequestID, &u.RequestID); err != nil {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMalformed, Detail: "request_id must be a string"}
	}
	if u.RequestID == "" {
		return u, &otelstats.RejectError{Reason: otelstats.ReasonMissingRequestID}
	}
	if len(u.RequestID) > otelstats.MaxIDLength {
		return u, reject(&u, otelstats.SideAuto, otelstats.ReasonTooLong, "request id longer than "+strconv.Itoa(otelstats.MaxIDLength)+" bytes")
	}
	k, err := parseKind(l.Type)
	if err != nil {
		return u, reject(&u, otelstats.SideAuto, otelstats.ReasonUnknownKind, err.Error())
	}
	u.Kind = k
	bad := func(r otelstats.Reason, detail string) (otelstats.Update, error) {
		return u, reject(&u, u.Side, r, detail)
	}
	if l.Side != nil {
		s, ok := otelstats.ParseSide(*l.Side)
		if !ok {
			return bad(otelstats.ReasonWrongSide, "side must be frontend or engine")
		}
		u.Side = s
	}
	if l.TS == nil {
		return bad(otelstats.ReasonBadTimestamp, "ts is required")
	}
	tsv, ok := parseTS(l.TS.String())
	if !ok {
		return bad(otelstats.ReasonBadTimestamp, "ts must be Unix seconds between 1970 and 2200")
	}
	u.Time = tsv
	str := func(dst *string, p *string) {
		if p != nil {
			*dst = *p
		}
	}
	str(&u.Model, l.Model)
	str(&u.Operation, l.Operation)
	str(&u.Scope, l.Scope)
	str(&u.FinishReason, l.FinishReason)
	str(&u.ErrorType, l.ErrorType)
	ints := []struct {
		dst  *int
		src  *json.Number
		name string
		need otelstats.Kind
	}{
		{&u.NumPromptTokens, l.NumPromptTokens, "num_prompt_tokens", otelstats.KindInputProcessed},
		{&u.NumComputedTokens, l.NumComputedTokens, "num_computed_tokens", otelstats.KindPrefilling},
		{&u.NumCachedTokens, l.NumCachedTokens, "num_cached_tokens", otelstats.KindPrefilling},
		{&u.NumNewTokens, l.NumNewTokens, "num_new_tokens", otelstats.KindDetokenized},
	}
	for _, f := range ints {
		if f.src == nil {
			if f.need == k {
				return bad(otelstats.ReasonMissingPayload, f.name+" is required on "+k.String())
			}
			continue
		}
		n, err := strconv.ParseInt(f.src.String(), 10, 64)
		if err != nil {
			if _, ferr := strconv.ParseFloat(f.src.String(), 64); ferr == nil {
				return bad(otelstats.ReasonMalformed, f.name+" must be an integer")
			}
			return bad(otelstats.ReasonAbsurdCount, f.name+" is out of range")
		}
		if n < 0 {
			return bad(otelstats.ReasonNegativeCount, f.name+" is "+strconv.FormatInt(n, 10))
		}
		if n > otelstats.MaxTokenCount {
			return bad(otelstats.ReasonAbsurdCount, f.name+" is "+strconv.FormatInt(n, 10))
		}
		*f.dst = int(n)
	}
	if k == otelstats.KindDecoding && l.NumNewTokens != nil && u.NumNewTokens == 0 {
		return bad(otelstats.ReasonMissingPayload, "DECODING with num_new_tokens 0")
	}
	if k == otelstats.KindFinished && u.FinishReason == "" {
		return bad(otelstats.ReasonMissingPayload, "finish_reason is required on FINISHED")
	}
	if k == otelstats.KindArrived && u.Model == "" {
		return bad(otelstats.ReasonMissingPayload, "model is required on ARRIVED")
	}
	if l.BusyTimeS != nil {
		b := *l.BusyTimeS
		if b < 0 || b > 1e6 {
			return bad(otelstats.ReasonNegativeCount, "busy_time_s out of range")
		}
		u.Busy = time.Duration(b * 1e9)
	}
	sp := l.SamplingParams
	if sp == nil && !l.topLevelSampling.IsZero() {
		sp = &l.topLevelSampling
	}
	if !sp.IsZero() {
		c := *sp
		u.Sampling = &c
	}
	return u, nil
}

// parseTS reads Unix seconds exactly from the JSON number's text, so
// "1700000000.301" is 301 ms past the second, not the nearest float64.
func parseTS(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > float64(maxTS) {
		return time.Time{}, false
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if strings.ContainsAny(s, "eE") || !hasFrac && strings.ContainsAny(intPart, "+-") {
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
	var n int
	if json.Unmarshal(raw, &n) == nil && n >= 0 && n <= 7 {
		return otelstats.Kind(n + 1), nil // vLLM's IntEnum starts at ARRIVED = 0
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
	dst = append(dst, `{"request_id":`...)
	dst = strconv.AppendQuote(dst, u.RequestID)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, u.Kind.String()...)
	dst = append(dst, `","ts":`...)
	dst = unixsec.Append(dst, u.Time)
	if u.Side != otelstats.SideAuto {
		dst = append(dst, `,"side":"`...)
		dst = append(dst, u.Side.String()...)
		dst = append(dst, '"')
	}
	q := func(k, v string) {
		if v != "" {
			dst = append(dst, ',', '"')
			dst = append(dst, k...)
			dst = append(dst, '"', ':')
			dst = strconv.AppendQuote(dst, v)
		}
	}
	q("model", u.Model)
	q("operation", u.Operation)
	q("scope", u.Scope)
	n := func(k string, v int, on bool) {
		if on {
			dst = append(dst, ',', '"')
			dst = append(dst, k...)
			dst = append(dst, '"', ':')
			dst = strconv.AppendInt(dst, int64(v), 10)
		}
	}
	n("num_prompt_tokens", u.NumPromptTokens, u.Kind == otelstats.KindInputProcessed || u.NumPromptTokens > 0)
	n("num_computed_tokens", u.NumComputedTokens, u.Kind == otelstats.KindPrefilling)
	n("num_cached_tokens", u.NumCachedTokens, u.Kind == otelstats.KindPrefilling)
	n("num_new_tokens", max(u.NumNewTokens, 1), u.Kind == otelstats.KindDecoding)
	n("num_new_tokens", u.NumNewTokens, u.Kind == otelstats.KindDetokenized)
	if u.Busy > 0 {
		dst = append(dst, `,"busy_time_s":`...)
		dst = strconv.AppendFloat(dst, u.Busy.Seconds(), 'g', -1, 64)
	}
	q("finish_reason", u.FinishReason)
	q("error_type", u.ErrorType)
	if !u.Sampling.IsZero() {
		b, _ := json.Marshal(u.Sampling)
		dst = append(dst, `,"sampling_params":`...)
		dst = append(dst, b...)
	}
	return append(dst, '}', '\n')
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
