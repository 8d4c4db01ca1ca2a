package transport

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// badLine is one entry of the update log's bad-input catalogue: each gets a
// typed rejection and a count in the tracker, and the valid request
// recorded around it is unaffected.
type badLine struct {
	name   string
	line   string
	reason otelstats.Reason
}

func badLines() []badLine {
	return []badLine{
		// SPEC §7–9's payloads.
		{name: "REMOTE_KV_WAIT without kv_source", line: `{"request_id":"v","type":"REMOTE_KV_WAIT","ts":1700000000.5}`, reason: otelstats.ReasonMissingPayload},
		{name: "REMOTE_KV_READY without num_remote_tokens", line: `{"request_id":"v","type":"REMOTE_KV_READY","ts":1700000000.5}`, reason: otelstats.ReasonMissingPayload},
		{name: "ENCODING without num_items", line: `{"request_id":"v","type":"ENCODING","ts":1700000000.5}`, reason: otelstats.ReasonMissingPayload},
		{name: "draft without accepted", line: `{"request_id":"v","type":"DECODING","ts":1700000000.5,"num_draft_tokens":4}`, reason: otelstats.ReasonDraftWithoutAccepted},
		{name: "accepted without draft", line: `{"request_id":"v","type":"DECODING","ts":1700000000.5,"num_accepted_tokens":2}`, reason: otelstats.ReasonDraftWithoutAccepted},
		{name: "kv_bytes negative", line: `{"request_id":"v","type":"REMOTE_KV_READY","ts":1700000000.5,"num_remote_tokens":1,"kv_bytes":-1}`, reason: otelstats.ReasonNegativeCount},
		{name: "pd_role unknown", line: `{"request_id":"w","type":"ARRIVED","ts":1700000000.5,"model":"m","pd_role":"both"}`, reason: otelstats.ReasonUnknownValue},
		{name: "encoder_cache_hit not a bool", line: `{"request_id":"v","type":"ENCODED","ts":1700000000.5,"encoder_cache_hit":"yes"}`, reason: otelstats.ReasonMalformed},
		{name: "invalid JSON", line: `{"request_id":"v","type":`, reason: otelstats.ReasonMalformed},
		{name: "not an object", line: `[1,2,3]`, reason: otelstats.ReasonMalformed},
		{name: "two objects on a line", line: `{"request_id":"v","type":"QUEUED","ts":1}{}`, reason: otelstats.ReasonMalformed},
		{name: "trailing junk", line: `{"request_id":"v","type":"QUEUED","ts":1700000000.5} ]]]}}}`, reason: otelstats.ReasonMalformed},
		{name: "null", line: `null`, reason: otelstats.ReasonMalformed},
		{name: "a string", line: `"QUEUED"`, reason: otelstats.ReasonMalformed},
		{name: "request id not UTF-8", line: "{\"request_id\":\"v\xff\",\"type\":\"QUEUED\",\"ts\":1700000000.5}", reason: otelstats.ReasonMalformed},
		// Python's json.dumps writes a string holding a lone surrogate as
		// its escape; decoded, it would be U+FFFD, like any other one's.
		{name: "request id with a lone surrogate", line: `{"request_id":"v\ud800","type":"QUEUED","ts":1700000000.5}`, reason: otelstats.ReasonMalformed},
		{name: "request id with a low surrogate first", line: `{"request_id":"\udc00\ud800","type":"QUEUED","ts":1700000000.5}`, reason: otelstats.ReasonMalformed},
		{name: "request id with a high surrogate before a letter", line: `{"request_id":"\ud83dx","type":"QUEUED","ts":1700000000.5}`, reason: otelstats.ReasonMalformed},
		{name: "scope not UTF-8", line: "{\"request_id\":\"v\",\"scope\":\"t\xfe\",\"type\":\"QUEUED\",\"ts\":1700000000.5}", reason: otelstats.ReasonMalformed},
		{name: "scope with a lone surrogate", line: `{"request_id":"v","scope":"t\udfff","type":"QUEUED","ts":1700000000.5}`, reason: otelstats.ReasonMalformed},
		{name: "scope not a string", line: `{"request_id":"v","scope":3,"type":"QUEUED","ts":1700000000.5}`, reason: otelstats.ReasonMalformed},
		{name: "request id not a string", line: `{"request_id":7,"type":"QUEUED","ts":1700000000}`, reason: otelstats.ReasonMalformed},
		{name: "missing request id", line: `{"type":"QUEUED","ts":1700000000}`, reason: otelstats.ReasonMissingRequestID},
		{name: "unknown kind", line: `{"request_id":"v","type":"TELEPORTED","ts":1700000000}`, reason: otelstats.ReasonUnknownKind},
		{name: "kind out of vLLM range", line: `{"request_id":"v","type":9,"ts":1700000000}`, reason: otelstats.ReasonUnknownKind},
		{name: "ts missing", line: `{"request_id":"v","type":"QUEUED"}`, reason: otelstats.ReasonBadTimestamp},
		{name: "ts negative", line: `{"request_id":"v","type":"QUEUED","ts":-5}`, reason: otelstats.ReasonBadTimestamp},
		{name: "ts a string", line: `{"request_id":"v","type":"QUEUED","ts":"now"}`, reason: otelstats.ReasonMalformed},
		{name: "ts infinite", line: `{"request_id":"v","type":"QUEUED","ts":1e400}`, reason: otelstats.ReasonBadTimestamp},
		{name: "ts year 3000", line: `{"request_id":"v","type":"QUEUED","ts":32503680000}`, reason: otelstats.ReasonBadTimestamp},
		{name: "ts year 2287, past int64 nanoseconds", line: `{"request_id":"v","type":"QUEUED","ts":10e9}`, reason: otelstats.ReasonBadTimestamp},
		{name: "count not an integer", line: `{"request_id":"v","type":"DECODING","ts":1700000000.5,"num_new_tokens":1.5}`, reason: otelstats.ReasonMalformed},
		{name: "count negative", line: `{"request_id":"v","type":"DETOKENIZED","ts":1700000000.5,"num_new_tokens":-1}`, reason: otelstats.ReasonNegativeCount},
		{name: "count absurd", line: `{"request_id":"v","type":"INPUT_PROCESSED","ts":1700000000.5,"num_prompt_tokens":99999999999999}`, reason: otelstats.ReasonAbsurdCount},
		{name: "count overflows int64", line: `{"request_id":"v","type":"INPUT_PROCESSED","ts":1700000000.5,"num_prompt_tokens":1e99}`, reason: otelstats.ReasonAbsurdCount},
		{name: "count a negative float", line: `{"request_id":"v","type":"DETOKENIZED","ts":1700000000.5,"num_new_tokens":-2.0}`, reason: otelstats.ReasonNegativeCount},
		{name: "count a fraction in exponent form", line: `{"request_id":"v","type":"DECODING","ts":1700000000.5,"num_new_tokens":15e-1}`, reason: otelstats.ReasonMalformed},
		{name: "type a fraction", line: `{"request_id":"v","type":2.5,"ts":1700000000}`, reason: otelstats.ReasonUnknownKind},
		{name: "integer count past int64", line: `{"request_id":"v","type":"INPUT_PROCESSED","ts":1700000000.5,"num_prompt_tokens":99999999999999999999}`, reason: otelstats.ReasonAbsurdCount},
		{name: "negative integer count past int64", line: `{"request_id":"v","type":"DETOKENIZED","ts":1700000000.5,"num_new_tokens":-99999999999999999999}`, reason: otelstats.ReasonNegativeCount},
		{name: "busy time absurd", line: `{"request_id":"v","type":"DETOKENIZED","ts":1700000000.5,"num_new_tokens":1,"busy_time_s":1e300}`, reason: otelstats.ReasonAbsurdCount},
		{name: "busy time negative", line: `{"request_id":"v","type":"DETOKENIZED","ts":1700000000.5,"num_new_tokens":1,"busy_time_s":-1}`, reason: otelstats.ReasonNegativeCount},
		{name: "PREFILLING without payload", line: `{"request_id":"v","type":"PREFILLING","ts":1700000000.5}`, reason: otelstats.ReasonMissingPayload},
		{name: "FINISHED without reason", line: `{"request_id":"v","type":"FINISHED","ts":1700000000.5}`, reason: otelstats.ReasonMissingPayload},
		{name: "unknown side", line: `{"request_id":"v","type":"FINISHED","ts":1700000000.5,"side":"gpu","finish_reason":"stop"}`, reason: otelstats.ReasonWrongSide},
	}
}

func TestBadLineCatalogue(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	var got []otelstats.RequestStats
	tr, err := otelstats.NewTracker(otelstats.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) { got = append(got, *s) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(t.Context()) })
	rejected := func(reason otelstats.Reason) int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		want := attribute.NewSet(attributes.RejectionReason.String(string(reason)))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == attributes.MetricRejectedUpdates {
					for _, dp := range s.DataPoints {
						if dp.Attributes.Equals(&want) {
							return dp.Value
						}
					}
				}
			}
		}
		return 0
	}
	must := func(line string) {
		t.Helper()
		if err := RecordLine(tr, []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	must(`{"request_id":"v","type":"ARRIVED","ts":1700000000,"model":"m"}`)
	must(`{"request_id":"v","type":"INPUT_PROCESSED","ts":1700000000.001,"num_prompt_tokens":10}`)
	for _, tc := range badLines() {
		t.Run(tc.name, func(t *testing.T) {
			before := rejected(tc.reason)
			err := RecordLine(tr, []byte(tc.line))
			var re *otelstats.RejectError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, otelstats.ErrRejected) || !errors.Is(err, tc.reason) {
				t.Fatalf("err = %v, want a RejectError with reason %s", err, tc.reason)
			}
			if len(err.Error()) > 600 {
				t.Errorf("error message is %d bytes long", len(err.Error()))
			}
			if after := rejected(tc.reason); after != before+1 {
				t.Fatalf("llm.rejected_updates{%s} %d → %d", tc.reason, before, after)
			}
		})
	}
	// The valid request, recorded around all of that, is intact.
	must(`{"request_id":"v","type":"FINISHED","ts":1700000000.021,"finish_reason":"stop"}`)
	if len(got) != 1 || got[0].NumPromptTokens.N != 10 || got[0].E2ELatency.Value != 21*time.Millisecond {
		t.Fatalf("valid request damaged: %+v", got)
	}
}

// SPEC §7–9 through the update log: a decode instance's request with a
// transfer, speculative steps, an adapter and an encoder run, parsed with
// the SPEC's payload names and recorded into a tracker.
func TestServingUpdateLog(t *testing.T) {
	lines := []string{
		`{"request_id":"d1","type":"ARRIVED","ts":1700000000,"model":"m","pd_role":"decode","lora_adapter":"sql-lora"}`,
		`{"request_id":"d1","type":"INPUT_PROCESSED","ts":1700000000.001,"num_prompt_tokens":100}`,
		`{"request_id":"d1","type":"QUEUED","ts":1700000000.002}`,
		`{"request_id":"d1","type":"ENCODING","ts":1700000000.003,"num_items":2,"num_encoder_tokens":576}`,
		`{"request_id":"d1","type":"ENCODED","ts":1700000000.0035,"encoder_cache_hit":true}`,
		`{"request_id":"d1","type":"REMOTE_KV_WAIT","ts":1700000000.004,"kv_source":"prefill-0"}`,
		`{"request_id":"d1","type":"REMOTE_KV_READY","ts":1700000000.014,"num_remote_tokens":96,"kv_bytes":4194304,"kv_status":"ok"}`,
		`{"request_id":"d1","type":"PREFILLING","ts":1700000000.016,"num_computed_tokens":100,"num_cached_tokens":0}`,
		`{"request_id":"d1","type":"DECODING","ts":1700000000.020,"num_new_tokens":1}`,
		`{"request_id":"d1","type":"DECODING","ts":1700000000.030,"num_new_tokens":3,"num_draft_tokens":4,"num_accepted_tokens":2}`,
		`{"request_id":"d1","type":"FINISHED","ts":1700000000.031,"side":"engine","finish_reason":"stop"}`,
	}
	var got []otelstats.RequestStats
	tr, err := otelstats.NewTracker(otelstats.WithOnFinish(func(s *otelstats.RequestStats) { got = append(got, *s) }))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(t.Context())
	for _, l := range lines {
		u, err := ParseUpdate([]byte(l))
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		// The line written back parses to the same update.
		v, err := ParseUpdate(bytes.TrimSpace(AppendUpdateJSON(nil, &u)))
		if err != nil {
			t.Fatalf("re-encoded %s: %v", AppendUpdateJSON(nil, &u), err)
		}
		if v.PDRole != u.PDRole || v.LoRAAdapter != u.LoRAAdapter || v.KVSource != u.KVSource || v.KVStatus != u.KVStatus ||
			v.NumRemoteTokens != u.NumRemoteTokens || v.KVBytes != u.KVBytes || v.NumDraftTokens != u.NumDraftTokens ||
			v.NumAcceptedTokens != u.NumAcceptedTokens || v.NumItems != u.NumItems || v.NumEncoderTokens != u.NumEncoderTokens ||
			v.EncoderCacheHit != u.EncoderCacheHit {
			t.Errorf("round trip of %s: %+v", l, v)
		}
		if err := tr.Record(u); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
	}
	tr.Flush()
	if len(got) != 1 {
		t.Fatalf("%d requests finished", len(got))
	}
	s := got[0]
	if s.PDRole != "decode" || s.LoRAAdapter != "sql-lora" || s.KVSource != "prefill-0" || s.NumRemoteTokens != 96 ||
		s.KVTransferBytes != 4<<20 || s.KVTransferDuration.Value != 10*time.Millisecond ||
		s.NumDraftTokens != 4 || s.NumAcceptedTokens != 2 || s.NumSpecSteps != 1 ||
		s.EncodeDuration.Value != 500*time.Microsecond || s.NumEncoderRuns != 1 {
		t.Fatalf("stats %s", s.AppendJSON(nil))
	}
	for _, want := range []string{`"kv_transfer_duration_s":0.01`, `"num_remote_tokens":96`, `"spec_acceptance_rate":0.5`,
		`"lora_adapter":"sql-lora"`, `"pd_role":"decode"`, `"encode_duration_s":0.0005`} {
		if !bytes.Contains(s.AppendJSON(nil), []byte(want)) {
			t.Errorf("RequestStats JSON lacks %s: %s", want, s.AppendJSON(nil))
		}
	}
}

// A router's traceparent on an instance's ARRIVED line puts the request's
// root under the router's span, as Arrive's ctx does (SPEC §7).
func TestUpdateLogTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	const tpHeader = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, l := range []string{
		`{"request_id":"p1","type":"ARRIVED","ts":1700000000,"model":"m","pd_role":"prefill","traceparent":"` + tpHeader + `"}`,
		`{"request_id":"p1","type":"FINISHED","ts":1700000000.01,"finish_reason":"stop"}`,
	} {
		u, err := ParseUpdate([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if back := AppendUpdateJSON(nil, &u); u.Kind == otelstats.KindArrived && !bytes.Contains(back, []byte(tpHeader)) {
			t.Errorf("re-encoded ARRIVED lacks the traceparent: %s", back)
		}
		if err := tr.Record(u); err != nil {
			t.Fatal(err)
		}
	}
	_ = tr.Shutdown(t.Context())
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		ended[0].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("root %v, want a child of the router's span", ended)
	}
	if _, err := ParseUpdate([]byte(`{"request_id":"x","type":"ARRIVED","ts":1,"model":"m","traceparent":"nope"}`)); !errors.Is(err, otelstats.ReasonMalformed) {
		t.Errorf("a bad traceparent: %v", err)
	}
}

// TestParseUpdateTimes: ts is read exactly from its decimal text, an
// exponent included; a byte order mark before a line (a log saved by a
// Windows editor) is not part of it.
func TestParseUpdateTimes(t *testing.T) {
	for _, c := range []struct{ ts, want string }{
		{"1700000000.301", "1700000000.301000000"},
		{"1.700000000301e9", "1700000000.301000000"},
		{"1.700000000301E+9", "1700000000.301000000"},
		{"17000000003010e-4", "1700000000.301000000"},
		{"1700000000.123456789", "1700000000.123456789"},
		{"1700000000", "1700000000.000000000"},
		{"17e8", "1700000000.000000000"},
	} {
		u, err := ParseUpdate([]byte(`{"request_id":"v","type":"QUEUED","ts":` + c.ts + `}`))
		if err != nil {
			t.Fatalf("%s: %v", c.ts, err)
		}
		if got := fmt.Sprintf("%d.%09d", u.Time.Unix(), u.Time.Nanosecond()); got != c.want {
			t.Errorf("ts %s = %s, want %s", c.ts, got, c.want)
		}
	}
	u, err := ParseUpdate([]byte("\xEF\xBB\xBF{\"request_id\":\"v\",\"type\":\"QUEUED\",\"ts\":1700000000}\r\n"))
	if err != nil || u.RequestID != "v" {
		t.Errorf("a line after a byte order mark: %+v, %v", u, err)
	}
}
