package otelstats

import (
	"math"
	"strconv"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
)

// check validates what can be validated without the request's state, and
// resolves SideAuto.
func check(u *Update) (Side, *RejectError) {
	side := u.Side
	if !u.Kind.Valid() {
		return side, reject(u, side, ReasonUnknownKind, "")
	}
	if u.RequestID == "" {
		return side, reject(u, side, ReasonMissingRequestID, "")
	}
	if len(u.RequestID) > MaxIDLength {
		return side, reject(u, side, ReasonTooLong, "request id longer than "+strconv.Itoa(MaxIDLength)+" bytes")
	}
	side, rerr := resolveSide(u)
	if rerr != nil {
		return side, rerr
	}
	if len(u.Scope) > MaxNameLength {
		return side, reject(u, side, ReasonTooLong, "scope longer than "+strconv.Itoa(MaxNameLength)+" bytes")
	}
	if u.Time.IsZero() || u.Time.Before(minTime) || u.Time.After(maxTime) {
		return side, reject(u, side, ReasonBadTimestamp, "time must lie between 1970 and 2200")
	}
	return side, checkPayload(u, side)
}

// resolveSide is the side u is recorded by: its own, or its kind's.
func resolveSide(u *Update) (Side, *RejectError) {
	side, own := u.Side, sideOf(u.Kind)
	switch {
	case side > SideEngine:
		return side, reject(u, side, ReasonWrongSide, "unknown side")
	case side == SideAuto && own == SideAuto:
		return SideFrontend, nil
	case side == SideAuto:
		return own, nil
	case own != SideAuto && side != own:
		return side, reject(u, side, ReasonWrongSide, u.Kind.String()+" is recorded by the "+own.String())
	}
	return side, nil
}

// checkPayload is the per-kind check of an update's payload (SPEC §1: each
// kind's required payload is present and sane). A switch, not a table of
// functions: an indirect call would make every Update escape to the heap.
func checkPayload(u *Update, side Side) *RejectError {
	switch u.Kind {
	case KindArrived:
		return checkArrived(u, side)
	case KindInputProcessed:
		return checkCounts(u, side, namedCount{u.NumPromptTokens, "num_prompt_tokens"})
	case KindPrefilling:
		return checkPrefilling(u, side)
	case KindDecoding:
		return checkDecoding(u, side)
	case KindDetokenized:
		return checkDetokenized(u, side)
	case KindFinished:
		return checkFinished(u, side)
	case KindRemoteKVWait:
		return checkKVWait(u, side)
	case KindRemoteKVReady:
		return checkKVReady(u, side)
	case KindEncoding:
		return checkEncoding(u, side)
	}
	return nil
}

func checkArrived(u *Update, side Side) *RejectError {
	if u.Model == "" {
		return reject(u, side, ReasonMissingPayload, "ARRIVED needs a model")
	}
	switch u.PDRole {
	case "", PDRolePrefill, PDRoleDecode:
		return nil
	}
	return reject(u, side, ReasonUnknownValue, "pd_role must be prefill, decode or empty")
}

func checkPrefilling(u *Update, side Side) *RejectError {
	if r := checkCounts(u, side, namedCount{u.NumComputedTokens, "num_computed_tokens"}, namedCount{u.NumCachedTokens, "num_cached_tokens"}); r != nil {
		return r
	}
	if u.NumCachedTokens > u.NumComputedTokens {
		return reject(u, side, ReasonCachedExceedsComputed,
			strconv.Itoa(u.NumCachedTokens)+" cached > "+strconv.Itoa(u.NumComputedTokens)+" computed")
	}
	return nil
}

// checkDecoding checks a DECODING's counts and SPEC §8's rules for a
// speculative step: accepted ≤ draft and accepted ≤ the step's new tokens.
func checkDecoding(u *Update, side Side) *RejectError {
	if r := checkCount(u, side, u.NumNewTokens, maxNewTokensStep, "num_new_tokens"); r != nil {
		return r
	}
	return checkSpec(u, side, u.NumNewTokens, u.NumDraftTokens, u.NumAcceptedTokens)
}

// checkSpec is checkDecoding's speculative part (Step's fast path checks
// the same in validSpec); newTokens 0 is decodeTokens' default.
func checkSpec(u *Update, side Side, newTokens, draft, accepted int) *RejectError {
	if draft == 0 && accepted == 0 {
		return nil
	}
	if r := checkCounts(u, side, namedCount{draft, "num_draft_tokens"}, namedCount{accepted, "num_accepted_tokens"}); r != nil {
		return r
	}
	if accepted > draft {
		return reject(u, side, ReasonAcceptedExceedsDraft,
			strconv.Itoa(accepted)+" accepted > "+strconv.Itoa(draft)+" draft tokens")
	}
	n := decodeTokens(newTokens, draft, accepted)
	if accepted > n {
		return reject(u, side, ReasonAcceptedExceedsNewTokens,
			strconv.Itoa(accepted)+" accepted > "+strconv.Itoa(n)+" new tokens")
	}
	if n > maxNewTokensStep {
		// The default, accepted + 1, is bounded as a given count is.
		return reject(u, side, ReasonAbsurdCount, "num_accepted_tokens + 1 is "+strconv.Itoa(n))
	}
	return nil
}

// decodeTokens is how many tokens a DECODING yielded: newTokens when the
// engine gave them; without them, in a speculative step (draft > 0), the
// accepted draft tokens and the target's own one, accepted + 1, as a vLLM
// or SGLang step yields (a 1 there would count tokens short and reject
// every step that accepted two or more, by accepted ≤ new tokens, SPEC §8);
// else one.
func decodeTokens(newTokens, draft, accepted int) int {
	switch {
	case newTokens > 0:
		return newTokens
	case draft > 0:
		return accepted + 1
	}
	return 1
}

func checkDetokenized(u *Update, side Side) *RejectError {
	if r := checkCount(u, side, u.NumNewTokens, maxNewTokensStep, "num_new_tokens"); r != nil {
		return r
	}
	if u.Busy < 0 {
		return reject(u, side, ReasonNegativeCount, "negative busy time")
	}
	if u.Busy > maxBusy {
		return reject(u, side, ReasonAbsurdCount, "busy time "+u.Busy.String()+" longer than "+maxBusy.String())
	}
	return nil
}

func checkFinished(u *Update, side Side) *RejectError {
	if u.FinishReason == "" {
		return reject(u, side, ReasonMissingPayload, "FINISHED needs a finish_reason")
	}
	return checkCounts(u, side, namedCount{u.NumPromptTokens, "num_prompt_tokens"}, namedCount{u.NumOutputTokens, "num_output_tokens"})
}

func checkKVWait(u *Update, side Side) *RejectError {
	if u.KVSource == "" {
		return reject(u, side, ReasonMissingPayload, "REMOTE_KV_WAIT needs a kv_source")
	}
	if len(u.KVSource) > MaxModelLength {
		return reject(u, side, ReasonTooLong, "kv_source longer than "+strconv.Itoa(MaxModelLength)+" bytes")
	}
	return checkCounts(u, side, namedCount{u.NumRemoteTokens, "num_remote_tokens"})
}

func checkKVReady(u *Update, side Side) *RejectError {
	if r := checkCounts(u, side, namedCount{u.NumRemoteTokens, "num_remote_tokens"}); r != nil {
		return r
	}
	if u.KVBytes < 0 {
		return reject(u, side, ReasonNegativeCount, "kv_bytes is "+strconv.FormatInt(u.KVBytes, 10))
	}
	if u.KVBytes > maxKVBytes {
		return reject(u, side, ReasonAbsurdCount, "kv_bytes is "+strconv.FormatInt(u.KVBytes, 10))
	}
	switch u.KVStatus {
	case "", KVStatusOK, KVStatusFailed:
		return nil
	}
	return reject(u, side, ReasonUnknownValue, "kv_status must be ok or failed")
}

func checkEncoding(u *Update, side Side) *RejectError {
	if u.NumItems <= 0 {
		if u.NumItems < 0 {
			return reject(u, side, ReasonNegativeCount, "num_items is "+strconv.Itoa(u.NumItems))
		}
		return reject(u, side, ReasonMissingPayload, "ENCODING needs num_items")
	}
	return checkCounts(u, side, namedCount{u.NumItems, "num_items"}, namedCount{u.NumEncoderTokens, "num_encoder_tokens"})
}

// namedCount is a payload count and its field name.
type namedCount struct {
	n    int
	name string
}

// checkCounts checks payload counts: none negative, none absurd.
func checkCounts(u *Update, side Side, cs ...namedCount) *RejectError {
	for _, c := range cs {
		if r := checkCount(u, side, c.n, MaxTokenCount, c.name); r != nil {
			return r
		}
	}
	return nil
}

func checkCount(u *Update, side Side, n, limit int, name string) *RejectError {
	if n < 0 {
		return reject(u, side, ReasonNegativeCount, name+" is "+strconv.Itoa(n))
	}
	if n > limit {
		return reject(u, side, ReasonAbsurdCount, name+" is "+strconv.Itoa(n))
	}
	return nil
}

// maxKVBytes bounds a transfer's reported size: a petabyte.
const maxKVBytes = 1 << 50

// capNames cuts u's client-supplied names at their caps, counting each cut
// (see MaxModelLength). Identities are left for check to reject.
func (t *Tracker) capNames(u *Update) {
	t.capString(&u.Model, MaxModelLength, attributes.RequestModel)
	t.capString(&u.Operation, MaxNameLength, attributes.OperationName)
	t.capString(&u.FinishReason, MaxNameLength, attributes.FinishReasons)
	t.capString(&u.ErrorType, MaxNameLength, attributes.ErrorType)
	t.capString(&u.LoRAAdapter, MaxModelLength, attributes.LoRAAdapter)
	// kv_source is only cleaned: check rejects one longer than its cap.
	t.capString(&u.KVSource, math.MaxInt, attributes.KVTransferSource)
}

// cleanAttr is the attribute key=s with s's invalid UTF-8 replaced, counted
// under key. For identities (request id, scope), which stay as given for
// matching updates and are cleaned only where they become attributes: two
// ids differing in invalid bytes are still two requests.
func (t *Tracker) cleanAttr(key attribute.Key, s string) attribute.KeyValue {
	t.capString(&s, math.MaxInt, key)
	return key.String(s)
}

// capString cuts *s at n bytes on a UTF-8 boundary, counting the cut under
// key. A string that is not valid UTF-8 has each run of invalid bytes replaced
// by U+FFFD first, counted alike: OTLP strings are UTF-8, and one such
// value among a metric export's attributes would fail the whole export.
func (t *Tracker) capString(s *string, n int, key attribute.Key) {
	var changed bool
	if *s, changed = textcap.Clean(*s, n); changed {
		t.inst.countTruncated(key)
	}
}

// capFinishReasons copies FINISHED's per-choice finish reasons, at most
// MaxChoiceFinishReasons of at most MaxNameLength bytes each (as
// FinishReason): n can be large, and each choice's reason comes from
// outside.
func (t *Tracker) capFinishReasons(reasons []string) []string {
	return t.capList(reasons, MaxChoiceFinishReasons, MaxNameLength, attributes.FinishReasons)
}

// capStops copies a request's stop sequences, at most MaxStopSequences of
// at most MaxStopLength bytes each: a 5 MiB stop string must not make the
// trace too large to export (issue 12.6).
func (t *Tracker) capStops(stops []string) []string {
	if len(stops) == 0 {
		return nil
	}
	return t.capList(stops, MaxStopSequences, MaxStopLength, attributes.RequestStopSequences)
}

// capList copies a client's list of strings, at most n of at most size
// bytes each, counting what it cuts under key.
func (t *Tracker) capList(list []string, n, size int, key attribute.Key) []string {
	if len(list) > n {
		list = list[:n]
		t.inst.countTruncated(key)
	}
	out := make([]string, len(list))
	for i, s := range list {
		t.capString(&s, size, key)
		out[i] = s
	}
	return out
}
