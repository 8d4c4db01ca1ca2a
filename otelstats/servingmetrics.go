package otelstats

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// servingInstruments are SPEC §7–9's metrics. They are recorded through the
// MeterProvider for the requests that had a transfer, a speculative step or
// an encoder run — a request without any costs nothing here.
type servingInstruments struct {
	kvDuration, encDuration, acceptance     metric.Float64Histogram
	kvTokens, kvBytes, kvFailures           metric.Int64Counter
	draft, accepted, steps, acceptedPerPosn metric.Int64Counter
}

func (in *servingInstruments) init(mk *maker) {
	hist, counter := mk.hist, mk.counter
	hist(&in.kvDuration, attributes.MetricKVTransferDuration, attributes.UnitSeconds,
		"KV cache transfer from the prefill instance (REMOTE_KV_WAIT to REMOTE_KV_READY).", attributes.PhaseDurationBuckets())
	hist(&in.encDuration, attributes.MetricEncodeDuration, attributes.UnitSeconds,
		"A request's multimodal encoder time.", attributes.PhaseDurationBuckets())
	hist(&in.acceptance, attributes.MetricSpecAcceptanceRate, attributes.UnitRatio,
		"A request's speculative draft acceptance rate.", attributes.AcceptanceRateBuckets())
	counter(&in.kvTokens, attributes.MetricKVTransferTokens, attributes.UnitToken, "Prompt tokens whose KV cache was transferred.")
	counter(&in.kvBytes, attributes.MetricKVTransferBytes, attributes.UnitByte, "Bytes of KV cache transferred.")
	counter(&in.kvFailures, attributes.MetricKVTransferFailures, attributes.UnitTransfer, "KV cache transfers that failed (the prompt was recomputed).")
	counter(&in.draft, attributes.MetricSpecDraftTokens, attributes.UnitToken, "Tokens proposed by the speculative draft.")
	counter(&in.accepted, attributes.MetricSpecAcceptedTokens, attributes.UnitToken, "Draft tokens the target accepted.")
	counter(&in.steps, attributes.MetricSpecSteps, attributes.UnitStep, "Decode steps with a speculative draft.")
	counter(&in.acceptedPerPosn, attributes.MetricSpecAcceptedPerPosition, attributes.UnitToken,
		"Accepted draft tokens by draft position (0 … 15; larger positions in 15).")
}

// record records s's SPEC §7–9 values with the request's attributes as;
// positions are its accepted draft tokens by position, if it had any.
// The histograms' exemplar context is built where one is recorded: most
// requests have none of §7–9, and the context costs two allocations.
func (in *servingInstruments) record(sc trace.SpanContext, s *RequestStats, positions *[attributes.SpecPositions]int64, as *attrSets) {
	bg := context.Background()
	if s.KVSource != "" {
		if s.KVTransferDuration.Valid {
			in.kvDuration.Record(exemplarContext(sc), s.KVTransferDuration.Value.Seconds(), as.baseRec...)
		}
		in.kvTokens.Add(bg, int64(s.NumRemoteTokens), as.baseAdd...)
		if s.KVTransferBytes > 0 { // kv_bytes is optional: nothing to add when unreported
			in.kvBytes.Add(bg, s.KVTransferBytes, as.baseAdd...)
		}
		if s.KVTransferFailed {
			in.kvFailures.Add(bg, 1, as.baseAdd...)
		}
	}
	if s.NumEncoderRuns > 0 {
		in.encDuration.Record(exemplarContext(sc), s.EncodeDuration.Value.Seconds(), as.baseRec...)
	}
	if s.NumSpecSteps == 0 {
		return
	}
	in.draft.Add(bg, int64(s.NumDraftTokens), as.baseAdd...)
	in.accepted.Add(bg, int64(s.NumAcceptedTokens), as.baseAdd...)
	in.steps.Add(bg, int64(s.NumSpecSteps), as.baseAdd...)
	if s.NumDraftTokens > 0 {
		in.acceptance.Record(exemplarContext(sc), s.SpecAcceptanceRate, as.baseRec...)
	}
	if positions == nil {
		return
	}
	base := as.baseSet.ToSlice()
	for p, n := range positions {
		if n > 0 {
			kv := append(base[:len(base):len(base)], attributes.SpecPosition.Int(p))
			in.acceptedPerPosn.Add(bg, int64(n), metric.WithAttributeSet(attribute.NewSet(kv...)))
		}
	}
}

// exemplarContext is the context a histogram measurement carries so the SDK
// can link its exemplar to the request's trace.
func exemplarContext(sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return context.Background()
	}
	return trace.ContextWithSpanContext(context.Background(), sc)
}
