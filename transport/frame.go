package transport

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// Magic and Version open every binary stream.
const (
	Magic   = "LLMT"
	Version = 1
)

// headerLen is the length of the stream header (magic + version).
const headerLen = len(Magic) + 1

// Frame types.
const (
	FrameHello  byte = 0x01
	FrameUpdate byte = 0x02
	// FramePing carries nothing: an idle producer sends one now and then so
	// the collector's idle timeout does not close its connection.
	FramePing byte = 0x03
)

// Field ids of a HELLO frame, after the producer name; the same id ranges
// as an UPDATE's fields.
const (
	helloSide  byte = 0x01
	helloToken byte = 0x40
)

// Field ids of an UPDATE frame. Ids below 0x40 carry a uvarint, ids from
// 0x40 to 0x7F a string.
const (
	fieldPromptTokens    byte = 0x01
	fieldComputedTokens  byte = 0x02
	fieldCachedTokens    byte = 0x03
	fieldNewTokens       byte = 0x04
	fieldBusyNs          byte = 0x05
	fieldOutputTokens    byte = 0x06
	fieldRemoteTokens    byte = 0x07
	fieldKVBytes         byte = 0x08
	fieldDraftTokens     byte = 0x09
	fieldAcceptedTokens  byte = 0x0A
	fieldItems           byte = 0x0B
	fieldEncoderTokens   byte = 0x0C
	fieldEncoderCacheHit byte = 0x0D
	fieldModel           byte = 0x40
	fieldOperation       byte = 0x41
	fieldScope           byte = 0x42
	fieldFinishReason    byte = 0x43
	fieldErrorType       byte = 0x44
	fieldSampling        byte = 0x45
	fieldPDRole          byte = 0x46
	fieldKVSource        byte = 0x47
	fieldKVStatus        byte = 0x48
	fieldLoRAAdapter     byte = 0x49
	fieldTraceparent     byte = 0x4A
	fieldTracestate      byte = 0x4B
)

// maxKVBytes bounds kv_bytes, as the update log does.
const maxKVBytes = 1 << 50

const (
	flagSideMask = 0x03
	flagMono     = 0x04
	flagsKnown   = flagSideMask | flagMono
)

// DefaultMaxFrame bounds a frame's length (type + body).
const DefaultMaxFrame = 64 << 10

// MaxProducerName bounds a HELLO's producer name.
const MaxProducerName = 256

// MaxTokenLen bounds the shared token a HELLO may carry.
const MaxTokenLen = 256

// Errors of DecodeFrame.
var (
	// ErrIncomplete: the buffer ends inside the frame; read more.
	ErrIncomplete = errors.New("transport: incomplete frame")
	// ErrFrameSize: the length is 0 or above the maximum. The stream cannot
	// be resynchronised.
	ErrFrameSize = errors.New("transport: frame length out of range")
	// ErrMalformed: the frame's body does not decode; skip the frame.
	ErrMalformed = errors.New("transport: malformed frame")
)

// Hello is a producer's clock anchor: its wall clock and monotonic clock
// read at the same instant; it may also name the side the producer records
// for and carry the collector's shared token.
type Hello struct {
	Producer string
	WallNs   int64 // Unix nanoseconds
	MonoNs   int64 // the producer's monotonic clock, nanoseconds
	// Side is the side whose updates the producer sends (SideAuto: not
	// said; the side of each update counts).
	Side otelstats.Side
	// Token is the collector's shared token, when it requires one.
	Token string
}

// Stamp is an update's time as sent: Unix nanoseconds, or nanoseconds on the
// producer's monotonic clock when Mono is set.
type Stamp struct {
	Ns   int64
	Mono bool
}

// Frame is one decoded frame.
type Frame struct {
	Type  byte
	Hello Hello // FrameHello
	// Update is the FrameUpdate's update; its Time is unset until the stream's
	// clock maps Stamp.
	Update otelstats.Update
	Stamp  Stamp
	// Reject is set, with Update and Stamp filled as far as they decoded,
	// when the frame is well formed but the update lacks a required field:
	// the frame is consumed and the update rejected.
	Reject *otelstats.RejectError
}

// AppendHeader appends the binary stream header.
func AppendHeader(dst []byte) []byte { return append(append(dst, Magic...), Version) }

// AppendHello appends a HELLO frame.
func AppendHello(dst []byte, h Hello) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, FrameHello)
	dst = binary.AppendUvarint(dst, uint64(max(h.WallNs, 0)))
	dst = binary.AppendUvarint(dst, uint64(max(h.MonoNs, 0)))
	name := h.Producer
	if len(name) > MaxProducerName {
		name = name[:MaxProducerName]
	}
	dst = appendString(dst, name)
	if h.Side == otelstats.SideFrontend || h.Side == otelstats.SideEngine {
		dst = append(dst, helloSide, byte(h.Side))
	}
	if h.Token != "" && len(h.Token) <= MaxTokenLen {
		dst = append(dst, helloToken)
		dst = appendString(dst, h.Token)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// AppendPing appends a PING frame.
func AppendPing(dst []byte) []byte { return append(dst, 0, 0, 0, 1, FramePing) }

// AppendUpdate appends u as an UPDATE frame stamped with s (u.Time is not
// read). Fields are written when the kind needs them or they are set.
func AppendUpdate(dst []byte, u *otelstats.Update, s Stamp) []byte {
	start := len(dst)
	flags := byte(u.Side) & flagSideMask
	if s.Mono {
		flags |= flagMono
	}
	dst = append(dst, 0, 0, 0, 0, FrameUpdate, byte(u.Kind), flags)
	dst = binary.AppendUvarint(dst, uint64(max(s.Ns, 0)))
	dst = appendString(dst, u.RequestID)
	// A count is written when the kind needs it or it is positive, a
	// negative one where the kind uses it (given, specCounts, as the update
	// log does). A uvarint cannot carry it: it is written as its two's
	// complement, past any limit, so that the collector rejects the update
	// (absurd_count) as the tracker would have (negative_count); made 0 or
	// left out, it was taken.
	num := func(id byte, v int, on bool) {
		if on {
			dst = append(dst, id)
			dst = binary.AppendUvarint(dst, uint64(v))
		}
	}
	str := func(id byte, v string) {
		if v != "" {
			dst = append(dst, id)
			dst = appendString(dst, v)
		}
	}
	k := u.Kind
	spec := specCounts(u)
	num(fieldPromptTokens, u.NumPromptTokens, k == otelstats.KindInputProcessed || given(u.NumPromptTokens, "num_prompt_tokens", k))
	num(fieldComputedTokens, u.NumComputedTokens, k == otelstats.KindPrefilling || u.NumComputedTokens > 0)
	num(fieldCachedTokens, u.NumCachedTokens, k == otelstats.KindPrefilling || u.NumCachedTokens > 0)
	num(fieldNewTokens, u.NumNewTokens, k == otelstats.KindDetokenized || given(u.NumNewTokens, "num_new_tokens", k))
	num(fieldBusyNs, int(u.Busy), given(u.Busy, "busy_time_s", k))
	num(fieldOutputTokens, u.NumOutputTokens, given(u.NumOutputTokens, "num_output_tokens", k))
	num(fieldRemoteTokens, u.NumRemoteTokens, k == otelstats.KindRemoteKVReady || given(u.NumRemoteTokens, "num_remote_tokens", k))
	num(fieldKVBytes, int(u.KVBytes), given(u.KVBytes, "kv_bytes", k))
	num(fieldDraftTokens, u.NumDraftTokens, spec)
	num(fieldAcceptedTokens, u.NumAcceptedTokens, spec)
	num(fieldItems, u.NumItems, k == otelstats.KindEncoding || u.NumItems > 0)
	num(fieldEncoderTokens, u.NumEncoderTokens, given(u.NumEncoderTokens, "num_encoder_tokens", k))
	num(fieldEncoderCacheHit, 1, u.EncoderCacheHit)
	str(fieldModel, u.Model)
	str(fieldOperation, u.Operation)
	str(fieldScope, u.Scope)
	str(fieldFinishReason, u.FinishReason)
	str(fieldErrorType, u.ErrorType)
	str(fieldPDRole, u.PDRole)
	str(fieldKVSource, u.KVSource)
	str(fieldKVStatus, u.KVStatus)
	str(fieldLoRAAdapter, u.LoRAAdapter)
	if u.Parent.IsValid() {
		tp, ts := formatParent(u.Parent)
		str(fieldTraceparent, tp)
		str(fieldTracestate, ts)
	}
	if u.Sampling != nil {
		if b, err := json.Marshal(u.Sampling); err == nil && string(b) != "{}" {
			dst = append(dst, fieldSampling)
			dst = binary.AppendUvarint(dst, uint64(len(b)))
			dst = append(dst, b...)
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// FrameLen reads the length prefix at the start of b: the whole frame is
// 4+FrameLen bytes. It returns ErrIncomplete when b is shorter than 4 and
// ErrFrameSize when the length is out of range.
func FrameLen(b []byte, maxFrame int) (int, error) {
	if len(b) < 4 {
		return 0, ErrIncomplete
	}
	n := binary.BigEndian.Uint32(b)
	if n == 0 || uint64(n) > uint64(maxFrame) {
		return 0, ErrFrameSize
	}
	return int(n), nil
}

// DecodeFrame decodes the frame at the start of b and returns it with the
// number of bytes it took. On ErrIncomplete, read more and call again; on
// ErrFrameSize the stream is lost; on an error wrapping ErrMalformed (or a
// frame of an unknown type, returned without error) skip n bytes and go on.
// A frame with Reject set decoded but carries an update to reject.
func DecodeFrame(b []byte, maxFrame int) (f Frame, n int, err error) {
	l, err := FrameLen(b, maxFrame)
	if err != nil {
		return f, 0, err
	}
	if len(b) < 4+l {
		return f, 0, ErrIncomplete
	}
	n = 4 + l
	f.Type = b[4]
	body := b[5:n]
	switch f.Type {
	case FrameHello:
		err = decodeHello(body, &f.Hello)
	case FrameUpdate:
		err = decodeUpdate(body, &f)
	}
	return f, n, err
}

type malformed string

func (m malformed) Error() string        { return "transport: malformed frame: " + string(m) }
func (m malformed) Unwrap() error        { return ErrMalformed }
func (m malformed) Is(target error) bool { return target == ErrMalformed }

// reader walks a frame body.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = malformed("bad varint in " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int63 reads a uvarint that must fit an int64.
func (r *reader) int63(what string) int64 {
	v := r.uvarint(what)
	if v > math.MaxInt64 {
		r.fail(what + " out of range")
		return 0
	}
	return int64(v)
}

func (r *reader) bytes(what string, limit int) []byte {
	l := r.uvarint(what + " length")
	if r.err != nil {
		return nil
	}
	if l > uint64(len(r.b)) {
		r.err = malformed(what + " runs past the frame")
		return nil
	}
	if l > uint64(limit) {
		r.err = malformed(what + " longer than " + strconv.Itoa(limit) + " bytes")
		return nil
	}
	s := r.b[:l]
	r.b = r.b[l:]
	return s
}

func (r *reader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = malformed("frame ends before " + what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = malformed(msg)
	}
}

func decodeHello(body []byte, h *Hello) error {
	r := reader{b: body}
	h.WallNs = r.int63("wall_ns")
	h.MonoNs = r.int63("mono_ns")
	// A name is cut, not refused: a HELLO refused leaves its stream's
	// monotonic times without an anchor.
	h.Producer = cut(string(r.bytes("producer", len(r.b))), MaxProducerName)
	if r.err == nil && h.WallNs <= 0 {
		r.fail("wall_ns must be positive")
	}
	for len(r.b) > 0 && r.err == nil {
		id := r.byte1("field id")
		switch {
		case id == 0 || id >= 0x80:
			r.fail("bad HELLO field id 0x" + strconv.FormatUint(uint64(id), 16))
		case id < 0x40:
			v := r.uvarint("field")
			if id == helloSide && r.err == nil {
				if v != uint64(otelstats.SideFrontend) && v != uint64(otelstats.SideEngine) {
					r.fail("side must be 1 (frontend) or 2 (engine)")
				}
				h.Side = otelstats.Side(v)
			}
		case id == helloToken:
			if s := r.bytes("token", MaxTokenLen); r.err == nil {
				h.Token = string(s)
			}
		default:
			// A later version's field, skipped as an UPDATE's is: bounded
			// by the frame, not by the token's cap, or the HELLO would be
			// refused and its stream's monotonic times left unanchored.
			r.bytes("field", len(r.b))
		}
	}
	return r.err
}

func decodeUpdate(body []byte, f *Frame) error {
	r := reader{b: body}
	u := &f.Update
	k := otelstats.Kind(r.byte1("kind"))
	flags := r.byte1("flags")
	f.Stamp.Ns = r.int63("time_ns")
	id := r.bytes("request_id", len(r.b))
	if r.err != nil {
		return r.err
	}
	if !k.Valid() {
		return malformed("unknown kind " + strconv.Itoa(int(k)))
	}
	if flags&^flagsKnown != 0 || flags&flagSideMask == 3 {
		return malformed("unknown flags 0x" + strconv.FormatUint(uint64(flags), 16))
	}
	if len(id) == 0 {
		return malformed("empty request_id")
	}
	u.Kind = k
	u.Side = otelstats.Side(flags & flagSideMask)
	f.Stamp.Mono = flags&flagMono != 0
	if len(id) > otelstats.MaxIDLength {
		// The frame is whole: its update is refused as the update log and
		// the tracker refuse it (too_long), not counted as malformed.
		u.RequestID = string(id[:otelstats.MaxIDLength])
		f.Reject = &otelstats.RejectError{RequestID: u.RequestID, Kind: k, Side: u.Side,
			Reason: otelstats.ReasonTooLong, Detail: "request id longer than " + strconv.Itoa(otelstats.MaxIDLength) + " bytes"}
		return nil
	}
	u.RequestID = string(id)
	var tc traceContext
	seen, err := decodeFields(&r, u, &tc)
	if err != nil {
		return err
	}
	capStrings(u)
	if f.Reject = payloadRules(u, seen); f.Reject == nil && tc.parent != "" {
		var ok bool
		if u.Parent, ok = parseParent(tc.parent, tc.state); !ok {
			f.Reject = &otelstats.RejectError{RequestID: u.RequestID, Kind: k, Side: u.Side,
				Reason: otelstats.ReasonMalformed, Detail: "traceparent is not a W3C trace context"}
		}
	}
	return nil
}

// traceContext is an UPDATE's traceparent and tracestate as sent.
type traceContext struct{ parent, state string }

// decodeFields reads an UPDATE's fields into u and returns which numeric
// field ids it saw (a bit each).
func decodeFields(r *reader, u *otelstats.Update, tc *traceContext) (seen uint64, err error) {
	for len(r.b) > 0 && r.err == nil {
		id := r.byte1("field id")
		switch {
		case id == 0 || id >= 0x80:
			r.fail("bad field id 0x" + strconv.FormatUint(uint64(id), 16))
		case id < 0x40:
			v := r.uvarint("field")
			if r.err == nil {
				seen |= 1 << id
				numField(r, u, id, v)
			}
		default:
			// The frame bounds a string; capStrings cuts it after.
			if s := r.bytes("field", len(r.b)); r.err == nil {
				switch id {
				case fieldTraceparent:
					tc.parent = string(s)
				case fieldTracestate:
					tc.state = string(s)
				default:
					strField(r, u, id, s)
				}
			}
		}
	}
	return seen, r.err
}

// count is a token count as the tracker sees it: the value sent (the most
// an int holds, past that), which the tracker rejects as absurd_count
// above its limit, naming the number the producer sent.
func count(v uint64) int {
	return int(min(v, math.MaxInt))
}

// numField sets a uvarint field; unknown ids are skipped.
func numField(r *reader, u *otelstats.Update, id byte, v uint64) {
	switch id {
	case fieldPromptTokens:
		u.NumPromptTokens = count(v)
	case fieldComputedTokens:
		u.NumComputedTokens = count(v)
	case fieldCachedTokens:
		u.NumCachedTokens = count(v)
	case fieldNewTokens:
		u.NumNewTokens = count(v)
	case fieldOutputTokens:
		u.NumOutputTokens = count(v)
	case fieldRemoteTokens:
		u.NumRemoteTokens = count(v)
	case fieldDraftTokens:
		u.NumDraftTokens = count(v)
	case fieldAcceptedTokens:
		u.NumAcceptedTokens = count(v)
	case fieldItems:
		u.NumItems = count(v)
	case fieldEncoderTokens:
		u.NumEncoderTokens = count(v)
	case fieldEncoderCacheHit:
		u.EncoderCacheHit = v != 0
	case fieldKVBytes:
		u.KVBytes = int64(min(v, maxKVBytes+1)) // the tracker rejects more
	case fieldBusyNs:
		if v > uint64(1e6*float64(time.Second)) {
			r.fail("busy_ns out of range")
		}
		u.Busy = time.Duration(v)
	}
}

// strField sets a string field; unknown ids are skipped.
func strField(r *reader, u *otelstats.Update, id byte, s []byte) {
	switch id {
	case fieldModel:
		u.Model = string(s)
	case fieldOperation:
		u.Operation = string(s)
	case fieldScope:
		u.Scope = string(s)
	case fieldFinishReason:
		u.FinishReason = string(s)
	case fieldErrorType:
		u.ErrorType = string(s)
	case fieldPDRole:
		u.PDRole = string(s)
	case fieldKVSource:
		u.KVSource = string(s)
	case fieldKVStatus:
		u.KVStatus = string(s)
	case fieldLoRAAdapter:
		u.LoRAAdapter = string(s)
	case fieldSampling:
		var sp samplingJSON
		// As in the update log, a NaN or Infinity (Python's json.dumps
		// writes them) is an absent param, not a malformed frame.
		if err := json.Unmarshal(finiteJSON(s), &sp); err != nil {
			r.fail("sampling_params is not a JSON object of sampling params")
			return
		}
		u.Sampling = sp.params()
	}
}

// required are the fields each kind must carry, as in the update log.
var required = map[otelstats.Kind][]struct {
	id   byte
	name string
}{
	otelstats.KindInputProcessed: {{fieldPromptTokens, "num_prompt_tokens"}},
	otelstats.KindPrefilling:     {{fieldComputedTokens, "num_computed_tokens"}, {fieldCachedTokens, "num_cached_tokens"}},
	otelstats.KindDetokenized:    {{fieldNewTokens, "num_new_tokens"}},
	otelstats.KindRemoteKVReady:  {{fieldRemoteTokens, "num_remote_tokens"}},
	otelstats.KindEncoding:       {{fieldItems, "num_items"}},
}

// payloadRules are the update log's rules on what a kind carries (the
// tracker checks the rest): the rejection of a well-formed frame whose
// update breaks one, or nil.
func payloadRules(u *otelstats.Update, seen uint64) *otelstats.RejectError {
	has := func(id byte) bool { return seen&(1<<id) != 0 }
	bad := func(reason otelstats.Reason, detail string) *otelstats.RejectError {
		return &otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side, Reason: reason, Detail: detail}
	}
	for _, f := range required[u.Kind] {
		if !has(f.id) {
			return bad(otelstats.ReasonMissingPayload, f.name+" is required on "+u.Kind.String())
		}
	}
	switch {
	case u.Kind == otelstats.KindDecoding && has(fieldNewTokens) && u.NumNewTokens == 0:
		return bad(otelstats.ReasonMissingPayload, "DECODING with num_new_tokens 0")
	case has(fieldDraftTokens) != has(fieldAcceptedTokens):
		return bad(otelstats.ReasonDraftWithoutAccepted, "num_draft_tokens and num_accepted_tokens go together")
	case u.Kind == otelstats.KindRemoteKVWait && u.KVSource == "":
		return bad(otelstats.ReasonMissingPayload, "kv_source is required on REMOTE_KV_WAIT")
	}
	return nil
}
