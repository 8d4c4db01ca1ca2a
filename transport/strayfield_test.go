package transport

import (
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestParseUpdateIgnoresUnusedCounts: a count a kind does not read is
// ignored by the tracker (an Update's unused fields are), and so by the
// update log's reader, whatever it holds. Rejected, one stray field on an
// ARRIVED lost the whole request; a count the kind reads is still checked.
func TestParseUpdateIgnoresUnusedCounts(t *testing.T) {
	for _, c := range []struct {
		name, line string
		reason     otelstats.Reason // "": parsed
	}{
		{"ARRIVED with a negative prompt count",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":"m","num_prompt_tokens":-5}`, ""},
		{"ARRIVED with a huge output count",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":"m","num_output_tokens":1e400}`, ""},
		{"QUEUED with a fractional computed count",
			`{"request_id":"r","type":"QUEUED","ts":1,"num_computed_tokens":1.5}`, ""},
		{"DETOKENIZED with a negative kv_bytes",
			`{"request_id":"r","type":"DETOKENIZED","ts":1,"num_new_tokens":1,"kv_bytes":-1}`, ""},
		{"PREFILLING with a negative items count",
			`{"request_id":"r","type":"PREFILLING","ts":1,"num_computed_tokens":3,"num_cached_tokens":0,"num_items":-2}`, ""},
		{"ARRIVED with a negative busy time",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":"m","busy_time_s":-1}`, ""},
		{"QUEUED with a draft count alone",
			`{"request_id":"r","type":"QUEUED","ts":1,"num_draft_tokens":3}`, ""},
		{"DETOKENIZED with a negative busy time",
			`{"request_id":"r","type":"DETOKENIZED","ts":1,"num_new_tokens":1,"busy_time_s":-1}`, otelstats.ReasonNegativeCount},
		{"DECODING with a draft count alone",
			`{"request_id":"r","type":"DECODING","ts":1,"num_draft_tokens":3}`, otelstats.ReasonDraftWithoutAccepted},
		{"INPUT_PROCESSED with a negative prompt count",
			`{"request_id":"r","type":"INPUT_PROCESSED","ts":1,"num_prompt_tokens":-5}`, otelstats.ReasonNegativeCount},
		{"FINISHED with a negative prompt count",
			`{"request_id":"r","type":"FINISHED","ts":1,"finish_reason":"stop","num_prompt_tokens":-5}`, otelstats.ReasonNegativeCount},
		{"DECODING with a huge new-token count",
			`{"request_id":"r","type":"DECODING","ts":1,"num_new_tokens":1e400}`, otelstats.ReasonAbsurdCount},
		{"REMOTE_KV_WAIT with a negative remote count",
			`{"request_id":"r","type":"REMOTE_KV_WAIT","ts":1,"kv_source":"p","num_remote_tokens":-1}`, otelstats.ReasonNegativeCount},
		{"REMOTE_KV_READY with a negative kv_bytes",
			`{"request_id":"r","type":"REMOTE_KV_READY","ts":1,"num_remote_tokens":1,"kv_bytes":-1}`, otelstats.ReasonNegativeCount},
		{"ENCODING with a negative encoder count",
			`{"request_id":"r","type":"ENCODING","ts":1,"num_items":1,"num_encoder_tokens":-1}`, otelstats.ReasonNegativeCount},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseUpdate([]byte(c.line))
			var reason otelstats.Reason
			if err != nil {
				rerr, ok := err.(*otelstats.RejectError)
				if !ok {
					t.Fatalf("error %T %v, want *otelstats.RejectError", err, err)
				}
				reason = rerr.Reason
			}
			if reason != c.reason {
				t.Errorf("ParseUpdate: reason %q (%v), want %q", reason, err, c.reason)
			}
		})
	}
}
