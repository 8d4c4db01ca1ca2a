package transport

import (
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
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
		{name: "invalid JSON", line: `{"request_id":"v","type":`, reason: otelstats.ReasonMalformed},
		{name: "not an object", line: `[1,2,3]`, reason: otelstats.ReasonMalformed},
		{name: "two objects on a line", line: `{"request_id":"v","type":"QUEUED","ts":1}{}`, reason: otelstats.ReasonMalformed},
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
		{name: "count overflows int64", line: `{"request_id":"v","type":"INPUT_PROCESSED","ts":1700000000.5,"num_prompt_tokens":1e99}`, reason: otelstats.ReasonMalformed},
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
