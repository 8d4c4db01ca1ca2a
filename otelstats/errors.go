package otelstats

import (
	"errors"
	"strconv"
	"strings"
)

// Reason says which rule an update broke. It is the value of the
// llm.rejection.reason attribute on llm.rejected_updates, and it is an error
// itself, so errors.Is(err, otelstats.ReasonTimeBackwards) works on any
// rejection.
type Reason string

// Rejection reasons.
const (
	ReasonUnknownKind           Reason = "unknown_kind"
	ReasonMissingRequestID      Reason = "missing_request_id"
	ReasonTooLong               Reason = "too_long"
	ReasonBadTimestamp          Reason = "bad_timestamp"
	ReasonWrongSide             Reason = "wrong_side"
	ReasonMissingPayload        Reason = "missing_payload"
	ReasonNegativeCount         Reason = "negative_count"
	ReasonAbsurdCount           Reason = "absurd_count"
	ReasonCachedExceedsComputed Reason = "cached_exceeds_computed"
	ReasonComputedExceedsTokens Reason = "computed_exceeds_tokens"
	ReasonUnknownRequest        Reason = "unknown_request"
	ReasonAmbiguousRequest      Reason = "ambiguous_request"
	ReasonDuplicateArrival      Reason = "duplicate_arrival"
	ReasonAfterFinished         Reason = "after_finished"
	ReasonBadTransition         Reason = "bad_transition"
	ReasonTimeBackwards         Reason = "time_backwards"
	ReasonOverloaded            Reason = "overloaded"
	ReasonClosed                Reason = "closed"
	ReasonMalformed             Reason = "malformed"
	ReasonUnknownValue          Reason = "unknown_value" // pd_role or kv_status outside its values

	// SPEC §7–8's rules.
	ReasonDuplicateTransfer        Reason = "duplicate_kv_transfer"   // a second REMOTE_KV_WAIT for a request
	ReasonRemoteExceedsPrompt      Reason = "remote_exceeds_prompt"   // num_remote_tokens > num_prompt_tokens
	ReasonRemoteExceedsComputed    Reason = "remote_exceeds_computed" // remote + cached > computed after the transfer
	ReasonAcceptedExceedsDraft     Reason = "accepted_exceeds_draft"
	ReasonAcceptedExceedsNewTokens Reason = "accepted_exceeds_new_tokens"
	ReasonDraftWithoutAccepted     Reason = "draft_without_accepted" // one of the pair given without the other
)

func (r Reason) Error() string { return "llmtrace: " + strings.ReplaceAll(string(r), "_", " ") }

// ErrRejected matches every rejection: errors.Is(err, ErrRejected).
var ErrRejected = errors.New("llmtrace: update rejected")

// RejectError is the error for a rejected update. The request's state is
// unchanged by a rejected update.
type RejectError struct {
	RequestID string
	Kind      Kind
	Side      Side
	Reason    Reason
	Detail    string
}

func (e *RejectError) Error() string {
	var b strings.Builder
	if e.RequestID == "" && e.Kind == 0 {
		b.WriteString("llmtrace: update rejected: ")
		b.WriteString(strings.ReplaceAll(string(e.Reason), "_", " "))
		if e.Detail != "" {
			b.WriteString(": ")
			b.WriteString(e.Detail)
		}
		return b.String()
	}
	b.WriteString("llmtrace: request ")
	id := e.RequestID
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	b.WriteString(strconv.Quote(id))
	b.WriteString(": ")
	b.WriteString(e.Kind.String())
	if e.Side != SideAuto {
		b.WriteString(" (")
		b.WriteString(e.Side.String())
		b.WriteString(")")
	}
	b.WriteString(" rejected: ")
	b.WriteString(strings.ReplaceAll(string(e.Reason), "_", " "))
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap lets errors.Is match both ErrRejected and the Reason.
func (e *RejectError) Unwrap() []error { return []error{ErrRejected, e.Reason} }

func reject(u *Update, side Side, r Reason, detail string) *RejectError {
	id := u.RequestID
	if len(id) > MaxIDLength {
		id = id[:MaxIDLength]
	}
	return &RejectError{RequestID: id, Kind: u.Kind, Side: side, Reason: r, Detail: detail}
}
