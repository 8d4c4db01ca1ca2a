package transport

import (
	"testing"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestParseUpdateWrongTypeFailsOnlyWhatReadsIt (README: a field of the
// wrong type fails only what reads it): a field of the wrong type that the
// update's kind does not read is ignored, as the tracker ignores the field;
// one the kind reads still makes the line malformed, now with its request
// id and kind.
func TestParseUpdateWrongTypeFailsOnlyWhatReadsIt(t *testing.T) {
	for _, c := range []struct {
		name, line string
		malformed  bool
	}{
		{"ARRIVED with a string busy time",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":"m","busy_time_s":"x"}`, false},
		{"ARRIVED with an overflowing temperature",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":"m","temperature":1e400}`, false},
		{"QUEUED with an object finish reason and a numeric kv_source",
			`{"request_id":"r","type":"QUEUED","ts":1,"finish_reason":{},"kv_source":5}`, false},
		{"DECODING with sampling params that are a list",
			`{"request_id":"r","type":"DECODING","ts":1,"sampling_params":[1,2]}`, false},
		{"FINISHED with a numeric lora_adapter",
			`{"request_id":"r","type":"FINISHED","ts":1,"finish_reason":"stop","lora_adapter":7}`, false},
		{"DETOKENIZED with a string busy time",
			`{"request_id":"r","type":"DETOKENIZED","ts":1,"num_new_tokens":1,"busy_time_s":"x"}`, true},
		{"INPUT_PROCESSED with an overflowing temperature",
			`{"request_id":"r","type":"INPUT_PROCESSED","ts":1,"num_prompt_tokens":3,"temperature":1e400}`, true},
		{"FINISHED with a numeric finish reason",
			`{"request_id":"r","type":"FINISHED","ts":1,"finish_reason":5}`, true},
		{"ARRIVED with a numeric model",
			`{"request_id":"r","type":"ARRIVED","ts":1,"model":5}`, true},
		{"an ignored field before a read one",
			`{"request_id":"r","type":"FINISHED","ts":1,"busy_time_s":"x","finish_reason":"stop","error_type":5}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := ParseUpdate([]byte(c.line))
			if !c.malformed {
				if err != nil {
					t.Fatalf("ParseUpdate: %v, want the update", err)
				}
				if u.RequestID != "r" {
					t.Errorf("request id %q", u.RequestID)
				}
				return
			}
			rerr, ok := err.(*otelstats.RejectError)
			if !ok || rerr.Reason != otelstats.ReasonMalformed {
				t.Fatalf("ParseUpdate: %v, want malformed", err)
			}
			if rerr.RequestID != "r" || rerr.Kind == 0 {
				t.Errorf("rejection names request %q kind %v, want r and the kind", rerr.RequestID, rerr.Kind)
			}
		})
	}
}
