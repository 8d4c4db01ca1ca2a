package llmtraceconnector

import (
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/llmtrace/llmtrace/attributes"
)

// FuzzConsumeMalformedSpans sends spans with hostile timestamps and
// attributes of any type through the connector: it must not panic, every
// histogram it emits must have non-negative, finite values and bucket
// counts that add up to its count, and the requests counter must count at
// most one request per span.
func FuzzConsumeMalformedSpans(f *testing.F) {
	f.Add(uint64(1e18), int64(1e9), []byte{0, 1, 2, 3, 4, 5, 6, 7}, 0.3, -2.5, int64(7), `["stop"]`)
	f.Add(uint64(0), int64(-5), []byte{5, 5, 5, 9}, math.NaN(), math.Inf(1), int64(math.MinInt64), "x")
	f.Add(uint64(math.MaxUint64), int64(math.MaxInt64), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1e308, 4.9e-324, int64(math.MaxInt64), "")
	keys := []string{string(attributes.LatencyTimeToFirstToken), string(attributes.LatencyE2E), string(attributes.LatencyTimeInQueue),
		string(attributes.LatencyPrefill), string(attributes.LatencyDecode), string(attributes.LatencyInference),
		string(attributes.EngineUsageCompletionTokens), string(attributes.EngineUsagePromptTokens), string(attributes.EngineUsageCachedTokens),
		string(attributes.FinishReasons), string(attributes.RequestModel), string(attributes.ReconstructEngine), string(attributes.ErrorType)}
	f.Fuzz(func(t *testing.T, start uint64, dur int64, kinds []byte, d1, d2 float64, n int64, s string) {
		td := ptrace.NewTraces()
		sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetStartTimestamp(pcommon.Timestamp(start))
		sp.SetEndTimestamp(pcommon.Timestamp(start + uint64(dur)))
		for i, k := range kinds {
			key := keys[int(k)%len(keys)]
			switch i % 5 {
			case 0:
				sp.Attributes().PutDouble(key, d1)
			case 1:
				sp.Attributes().PutDouble(key, d2)
			case 2:
				sp.Attributes().PutInt(key, n)
			case 3:
				sp.Attributes().PutStr(key, s)
			case 4:
				sp.Attributes().PutEmptySlice(key).AppendEmpty().SetStr(s)
			}
		}
		sink := new(consumertest.MetricsSink)
		c := newConnector(createDefaultConfig().(*Config), nil, sink, zap.NewNop())
		c.consume(td, time.Unix(1, 0))
		c.consume(td, time.Unix(2, 0))
		c.flush(t.Context(), time.Unix(3, 0))
		for _, md := range sink.AllMetrics() {
			got, _ := fromPdata(md)
			for k, p := range got {
				if math.IsNaN(p.sum) || math.IsInf(p.sum, 0) || p.sum < 0 || p.value < 0 {
					t.Fatalf("%s = %+v", k, p)
				}
				if p.value > 2 && len(k) > len(attributes.MetricRequests) && k[:len(attributes.MetricRequests)+1] == attributes.MetricRequests+"{" {
					t.Fatalf("%s counted %d requests from 2 spans", k, p.value)
				}
			}
		}
	})
}
