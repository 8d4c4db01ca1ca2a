package llmtraceprocessor

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
)

// FuzzProcessMalformedSpans sends spans with hostile timestamps and
// latency attributes of any type (strings, bools, NaN, huge ints, slices)
// through the processor: it must not panic, every rebuilt child must lie
// inside its engine span with a non-negative duration, and a span whose
// keys are unusable must come out untouched.
func FuzzProcessMalformedSpans(f *testing.F) {
	f.Add(uint64(1e18), int64(1e9), []byte{0, 1, 2, 3, 4, 5}, 0.3, -2.5, int64(7), "x")
	f.Add(uint64(0), int64(-5), []byte{5, 5, 5}, math.NaN(), math.Inf(-1), int64(math.MinInt64), `["abort"`)
	f.Add(uint64(math.MaxUint64), int64(math.MaxInt64), []byte{1, 2, 3, 4, 5, 6, 7, 8}, 1e308, 4.9e-324, int64(math.MaxInt64), "")
	keys := []string{string(attributes.LatencyTimeToFirstToken), string(attributes.LatencyE2E), string(attributes.LatencyTimeInQueue),
		string(attributes.LatencyPrefill), string(attributes.LatencyDecode), string(attributes.EngineUsageCompletionTokens),
		string(attributes.FinishReasons), string(attributes.ReconstructEngine)}
	x := newExpander(nil)
	f.Fuzz(func(t *testing.T, start uint64, dur int64, kinds []byte, d1, d2 float64, n int64, s string) {
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{2})
		sp.SetStartTimestamp(pcommon.Timestamp(start))
		sp.SetEndTimestamp(pcommon.Timestamp(start + uint64(dur)))
		for i, k := range kinds {
			key := keys[int(k)%len(keys)]
			switch i % 6 {
			case 0:
				sp.Attributes().PutDouble(key, d1)
			case 1:
				sp.Attributes().PutDouble(key, d2)
			case 2:
				sp.Attributes().PutInt(key, n)
			case 3:
				sp.Attributes().PutStr(key, s)
			case 4:
				sp.Attributes().PutBool(key, true)
			case 5:
				sp.Attributes().PutEmptySlice(key).AppendEmpty().SetStr(s)
			}
		}
		before := ptrace.NewTraces()
		td.CopyTo(before)
		out, err := x.processTraces(context.Background(), td)
		if err != nil {
			t.Fatal(err)
		}
		parent := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		lo, hi := parent.StartTimestamp().AsTime(), parent.EndTimestamp().AsTime()
		sss := out.ResourceSpans().At(0).ScopeSpans()
		if sss.Len() == 1 {
			if out.SpanCount() != 1 {
				t.Fatal("spans added without a scope")
			}
			return
		}
		if hi.Before(lo) {
			hi = lo
		}
		kids := sss.At(1).Spans()
		for i := 0; i < kids.Len(); i++ {
			c := kids.At(i)
			cs, ce := c.StartTimestamp().AsTime(), c.EndTimestamp().AsTime()
			if ce.Before(cs) || cs.Before(lo) || ce.After(hi.Add(time.Nanosecond)) || c.ParentSpanID() != parent.SpanID() {
				t.Fatalf("child %s [%v, %v] not inside [%v, %v] under its parent", c.Name(), cs, ce, lo, hi)
			}
		}
	})
}
