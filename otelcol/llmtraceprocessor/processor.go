package llmtraceprocessor

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spanread"
	"github.com/llmtrace/llmtrace/reconstruct"
	"github.com/llmtrace/llmtrace/spans"
)

// expander adds the rebuilt children to a batch. Safe for concurrent use:
// each call takes its own tree from the pool.
type expander struct {
	engine *reconstruct.Engine // nil: detect per span
	pool   sync.Pool           // of *scratch
}

// scratch is one call's reusable memory: the rebuilt tree and its
// children's ids.
type scratch struct {
	tree spans.Tree
	ids  []trace.SpanID
}

func newExpander(e *reconstruct.Engine) *expander {
	x := &expander{engine: e}
	x.pool.New = func() any { return new(scratch) }
	return x
}

func (x *expander) processTraces(_ context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	sc := x.pool.Get().(*scratch)
	defer x.pool.Put(sc)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		x.expandResource(rss.At(i), sc)
	}
	return td, nil
}

// expandResource expands the engine spans of one resource into a scope of
// rebuilt spans appended to that resource (created on first need).
func (x *expander) expandResource(rs ptrace.ResourceSpans, sc *scratch) {
	t := &sc.tree
	sss := rs.ScopeSpans()
	var out ptrace.SpanSlice
	created := false
	n := sss.Len() // not the scope appended below
	for j := 0; j < n; j++ {
		ss := sss.At(j)
		scope := ss.Scope().Name()
		if scope == reconstruct.ScopeName {
			continue
		}
		sps := ss.Spans()
		for k := 0; k < sps.Len(); k++ {
			sp := sps.At(k)
			if spanread.Expanded(sp) || sp.TraceID().IsEmpty() || sp.SpanID().IsEmpty() {
				// Without ids, children could not be parented to the
				// span in its trace: it passes untouched.
				continue
			}
			in := spanread.Read(sp, scope)
			e := reconstruct.Resolve(&in, x.engine)
			r, ok := reconstruct.Compute(&in, e)
			if !ok || e.NoExpand {
				continue
			}
			t.Reset()
			r.Tree(t)
			if !created && len(t.Spans) > 1 { // no empty scope for a root alone
				nss := sss.AppendEmpty()
				nss.Scope().SetName(reconstruct.ScopeName)
				nss.Scope().SetVersion(reconstruct.Version())
				out, created = nss.Spans(), true
			}
			if created {
				sc.ids = appendChildren(out, sp, t, sc.ids)
			}
			sp.Attributes().PutStr(string(attributes.ReconstructEngine), e.Name)
			if r.Clamped > 0 {
				sp.Attributes().PutInt(string(attributes.ReconstructClamped), int64(r.Clamped))
			}
		}
	}
}

// appendChildren adds t's children (t.Spans[1:]) under parent. Their ids
// are derived from parent's (reconstruct.ChildSpanIDs): a parent delivered
// twice yields the same children twice, which backends keep once. ids is
// scratch memory, returned for reuse.
func appendChildren(out ptrace.SpanSlice, parent ptrace.Span, t *spans.Tree, ids []trace.SpanID) []trace.SpanID {
	ids = reconstruct.ChildSpanIDs(ids[:0], trace.TraceID(parent.TraceID()), trace.SpanID(parent.SpanID()), t.Spans[1:])
	for i := 1; i < len(t.Spans); i++ {
		s := &t.Spans[i]
		c := out.AppendEmpty()
		c.SetTraceID(parent.TraceID())
		c.SetSpanID(pcommon.SpanID(ids[i-1]))
		c.SetParentSpanID(parent.SpanID())
		// The engine span's W3C trace flags (bits 0-7: sampled, random);
		// the parent, the engine span, is local (bit 8 set, bit 9 clear).
		c.SetFlags(parent.Flags()&0xff | 0x100)
		if raw := parent.TraceState().AsRaw(); raw != "" {
			c.TraceState().FromRaw(raw)
		}
		c.SetName(s.Name)
		c.SetKind(ptrace.SpanKindInternal)
		c.SetStartTimestamp(pcommon.Timestamp(s.Start))
		c.SetEndTimestamp(pcommon.Timestamp(s.End))
		a := c.Attributes()
		a.EnsureCapacity(len(s.Attrs))
		for _, kv := range s.Attrs {
			putAttr(a, kv)
		}
	}
	return ids
}

func putAttr(m pcommon.Map, kv attribute.KeyValue) {
	k := string(kv.Key)
	switch kv.Value.Type() {
	case attribute.BOOL:
		m.PutBool(k, kv.Value.AsBool())
	case attribute.INT64:
		m.PutInt(k, kv.Value.AsInt64())
	case attribute.FLOAT64:
		m.PutDouble(k, kv.Value.AsFloat64())
	default:
		m.PutStr(k, kv.Value.String())
	}
}
