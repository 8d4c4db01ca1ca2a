package llmtraceconnector

import (
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
	"github.com/llmtrace/llmtrace/reconstruct"
)

// checkLabels fails on an attribute value of md, resource or data point,
// that is not UTF-8 (the Prometheus exporter refuses such a label value
// and drops the series; OTLP requires UTF-8) or is longer than limit.
func checkLabels(t *testing.T, md pmetric.Metrics, limit int) {
	t.Helper()
	check := func(where string, m pcommon.Map) {
		for k, v := range m.All() {
			s := v.AsString()
			if !utf8.ValidString(s) || len(s) > limit {
				t.Errorf("%s: %s = %q (%d bytes): want valid UTF-8 of at most %d bytes", where, k, s, len(s), limit)
			}
		}
	}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		check("resource", rm.Resource().Attributes())
		for j := 0; j < rm.ScopeMetrics().Len(); j++ {
			ms := rm.ScopeMetrics().At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				switch m.Type() {
				case pmetric.MetricTypeHistogram:
					for d := 0; d < m.Histogram().DataPoints().Len(); d++ {
						check(m.Name(), m.Histogram().DataPoints().At(d).Attributes())
					}
				case pmetric.MetricTypeSum:
					for d := 0; d < m.Sum().DataPoints().Len(); d++ {
						check(m.Name(), m.Sum().DataPoints().At(d).Attributes())
					}
				}
			}
		}
	}
}

// A failed request's error.type becomes a label on
// gen_ai.server.request.duration: bounded like the model and the finish
// reason, it must be cut on a rune boundary and stay UTF-8. Cut mid-rune
// (a long non-ASCII error message), the Prometheus exporter refused the
// failure series and the failures panel lost those requests.
func TestConnectorErrorTypeStaysUTF8(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	for i, et := range []string{
		"x" + strings.Repeat("é", 100), // valid, cut inside a rune at 128 bytes
		"engine\xff\xfeerror",          // not UTF-8
	} {
		sp := spantest.VLLM(ss, pcommon.TraceID{byte(i + 1)}, pcommon.SpanID{byte(i + 1)}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "error")
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Attributes().PutStr(string(attributes.ErrorType), et)
	}
	md := runConnector(t, createDefaultConfig().(*Config), td)
	checkLabels(t, md, reconstruct.MaxNameLength)
	got, _ := fromPdata(md)
	n := 0
	for k, p := range got {
		if strings.HasPrefix(k, attributes.MetricRequestDuration+"{") && strings.Contains(k, string(attributes.ErrorType)+"=") {
			n += int(p.count)
		}
	}
	if n != 2 {
		t.Errorf("%d failed requests carry error.type, want 2", n)
	}
}

// The resource attributes that key a series (resource_attributes) come
// from the sender as they are: a value that is not UTF-8 became the
// metrics' resource attribute (the Prometheus exporter's job and instance
// labels, refused), and a huge one was copied twice per resource, up to
// max_series resources.
func TestConnectorResourceAttributesBounded(t *testing.T) {
	td := ptrace.NewTraces()
	for i, attrs := range []map[string]string{
		{"service.name": "vllm\xff\xfe", "service.instance.id": "a"},
		{"service.name": "vllm", "service.instance.id": strings.Repeat("é", 1<<20)},
	} {
		rs := td.ResourceSpans().AppendEmpty()
		for k, v := range attrs {
			rs.Resource().Attributes().PutStr(k, v)
		}
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		spantest.VLLM(ss, pcommon.TraceID{byte(i + 1)}, pcommon.SpanID{byte(i + 1)}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	}
	md := runConnector(t, createDefaultConfig().(*Config), td)
	checkLabels(t, md, maxResourceValueLength)
	if n := md.ResourceMetrics().Len(); n != 2 {
		t.Errorf("%d resources, want 2", n)
	}
}
