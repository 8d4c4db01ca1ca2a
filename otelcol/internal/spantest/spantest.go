// Package spantest builds pdata traces for the components' tests and
// benchmarks: vLLM-shaped request spans, and sdktrace spans converted to
// pdata as an OTLP exporter would send them.
package spantest

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// VLLM appends to ss one llm_request span as vLLM V1 emits it: start at
// arrival, end 1 ms after e2e, the latencies in seconds.
func VLLM(ss ptrace.ScopeSpans, traceID pcommon.TraceID, spanID pcommon.SpanID, start time.Time, ttft, e2e, queue, prefill, decode float64, prompt, out int64, reason string) ptrace.Span {
	sp := ss.Spans().AppendEmpty()
	sp.SetTraceID(traceID)
	sp.SetSpanID(spanID)
	sp.SetName("llm_request")
	sp.SetKind(ptrace.SpanKindServer)
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Duration(e2e*float64(time.Second)) + time.Millisecond)))
	a := sp.Attributes()
	a.PutDouble(string(attributes.LatencyTimeToFirstToken), ttft)
	a.PutDouble(string(attributes.LatencyE2E), e2e)
	a.PutDouble(string(attributes.LatencyTimeInQueue), queue)
	a.PutDouble(string(attributes.LatencyPrefill), prefill)
	a.PutDouble(string(attributes.LatencyDecode), decode)
	a.PutDouble(string(attributes.LatencyInference), prefill+decode)
	a.PutInt(string(attributes.EngineUsagePromptTokens), prompt)
	a.PutInt(string(attributes.EngineUsageCompletionTokens), out)
	a.PutStr(string(attributes.RequestID), "cmpl-1")
	a.PutStr(string(attributes.FinishReasons), `["`+reason+`"]`)
	return sp
}

// FromSDK converts finished sdktrace spans to pdata, one resource and scope
// per span (as tests need, not as compact as an exporter).
func FromSDK(in []sdktrace.ReadOnlySpan) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, s := range in {
		rs := td.ResourceSpans().AppendEmpty()
		if r := s.Resource(); r != nil {
			for _, kv := range r.Attributes() {
				put(rs.Resource().Attributes(), kv)
			}
		}
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName(s.InstrumentationScope().Name)
		sp := ss.Spans().AppendEmpty()
		sc := s.SpanContext()
		sp.SetTraceID(pcommon.TraceID(sc.TraceID()))
		sp.SetSpanID(pcommon.SpanID(sc.SpanID()))
		if p := s.Parent(); p.IsValid() {
			sp.SetParentSpanID(pcommon.SpanID(p.SpanID()))
		}
		sp.SetName(s.Name())
		sp.SetKind(ptrace.SpanKind(s.SpanKind()))
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime()))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime()))
		if s.Status().Code == codes.Error {
			sp.Status().SetCode(ptrace.StatusCodeError)
		}
		for _, kv := range s.Attributes() {
			put(sp.Attributes(), kv)
		}
	}
	return td
}

func put(m pcommon.Map, kv attribute.KeyValue) {
	k := string(kv.Key)
	switch kv.Value.Type() {
	case attribute.BOOL:
		m.PutBool(k, kv.Value.AsBool())
	case attribute.INT64:
		m.PutInt(k, kv.Value.AsInt64())
	case attribute.FLOAT64:
		m.PutDouble(k, kv.Value.AsFloat64())
	case attribute.STRINGSLICE:
		sl := m.PutEmptySlice(k)
		for _, s := range kv.Value.AsStringSlice() {
			sl.AppendEmpty().SetStr(s)
		}
	default:
		m.PutStr(k, kv.Value.String())
	}
}

// Lifecycle is the one span mdatagen's generated lifecycle test consumes
// (a resource attribute, a span attribute, a name and a second long),
// with a trace and span id when withIDs: the components' own lifecycle
// tests send what the collector's tooling sends.
func Lifecycle(withIDs bool) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("resource", "R1")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.Attributes().PutStr("test_attr", "value_1")
	sp.SetName("test_span")
	now := time.Now()
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Second)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now))
	if withIDs {
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{1})
	}
	return td
}

// CheckType fails t unless typ is want and a valid component type.
func CheckType(t testing.TB, typ component.Type, want string) {
	t.Helper()
	if typ.String() != want {
		t.Fatalf("Type() = %q, want %s", typ, want)
	}
	if _, err := component.NewType(typ.String()); err != nil {
		t.Fatalf("Type() %q is not a valid component type: %v", typ, err)
	}
}
