package spans

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Source says where exported spans come from: the resource and the
// instrumentation scope every span of a tree reports. One Source is shared
// by all the trees a tracker exports.
type Source struct {
	Resource *resource.Resource
	Scope    instrumentation.Scope
}

// Export hands t's spans to sp as finished, read-only spans — children
// first, then the root, as ending them through a Tracer would — and returns
// the root's span context.
//
// It is the fast path for a tree whose every timestamp is already known:
// going through a Tracer builds, locks and snapshots a live span per span,
// boxes an option per timestamp and consults the sampler, about 5 µs and 9
// allocations a span; Export builds the same finished spans in four
// allocations for the whole tree. What it skips is what a finished tree does
// not need: the TracerProvider's sampler (the caller decided already) and
// the processors' OnStart (the spans were never live). The spans are
// sampled and are not retained by Export; sp owns them.
func (t *Tree) Export(sp sdktrace.SpanProcessor, src *Source) trace.SpanContext {
	if len(t.Spans) == 0 || sp == nil {
		return trace.SpanContext{}
	}
	h, out := newExport(src, t.Spans)
	traceID, rootID := t.TraceID, t.SpanID
	if !traceID.IsValid() {
		if t.Parent.IsValid() {
			traceID = t.Parent.TraceID()
		} else {
			traceID = NewTraceID()
		}
	}
	if !rootID.IsValid() {
		rootID = NewSpanID()
	}
	h.traceID, h.parent = traceID, t.Parent
	if t.Link.IsValid() {
		h.links = []sdktrace.Link{{SpanContext: t.Link}}
	}
	if t.Parent.IsValid() {
		h.state = t.Parent.TraceState()
	}
	h.root = &out[0]
	out[0].id, out[0].children = rootID, int32(len(out)-1)
	for i := 1; i < len(out); i++ {
		out[i].id = NewSpanID()
		sp.OnEnd(&out[i])
	}
	sp.OnEnd(&out[0])
	return out[0].SpanContext()
}

// ExportChildren hands ss to sp as finished, read-only spans in their
// order, each a direct child of parent: spans a layer adds under a root
// exported elsewhere (the proxy's under the tracker's request span). The
// i-th span's id is ids[i] where that is valid (ids may be shorter than
// ss), else a new one. Several siblings cost the four allocations of one
// tree rather than four each. Without a valid parent nothing is exported:
// a child cannot start a trace of its own.
func ExportChildren(sp sdktrace.SpanProcessor, src *Source, parent trace.SpanContext, ss []Span, ids []trace.SpanID) {
	if len(ss) == 0 || sp == nil || !parent.IsValid() {
		return
	}
	h, out := newExport(src, ss)
	h.traceID, h.parent, h.state = parent.TraceID(), parent, parent.TraceState()
	for i := range out {
		if i < len(ids) && ids[i].IsValid() {
			out[i].id = ids[i]
		} else {
			out[i].id = NewSpanID()
		}
		sp.OnEnd(&out[i])
	}
}

// newExport builds the finished spans of ss, without their ids, and what
// they share, without its identity: four allocations — the shared part,
// the spans, every attribute, every event.
func newExport(src *Source, ss []Span) (*exportTree, []finished) {
	nAttrs, nEvents := 0, 0
	for i := range ss {
		nAttrs += len(ss[i].Attrs)
		nEvents += len(ss[i].Events)
		for j := range ss[i].Events {
			nAttrs += len(ss[i].Events[j].Attrs)
		}
	}
	h := &exportTree{src: src}
	out := make([]finished, len(ss))
	kvs := make([]attribute.KeyValue, 0, nAttrs)
	var evs []sdktrace.Event
	if nEvents > 0 {
		evs = make([]sdktrace.Event, 0, nEvents)
	}
	take := func(a []attribute.KeyValue) []attribute.KeyValue {
		if len(a) == 0 {
			return nil
		}
		i := len(kvs)
		kvs = append(kvs, a...)
		return kvs[i:len(kvs):len(kvs)]
	}
	for i := range ss {
		s, f := &ss[i], &out[i]
		f.h = h
		f.name, f.kind = s.Name, s.Kind
		f.start, f.end = s.Start, s.End
		f.attrs = take(s.Attrs)
		if s.Status == codes.Error { // as the SDK: only an error keeps its description
			f.status = sdktrace.Status{Code: s.Status, Description: s.StatusDesc}
		} else {
			f.status = sdktrace.Status{Code: s.Status}
		}
		if len(s.Events) > 0 {
			j := len(evs)
			for k := range s.Events {
				e := &s.Events[k]
				evs = append(evs, sdktrace.Event{Name: e.Name, Time: time.Unix(0, e.Time), Attributes: take(e.Attrs)})
			}
			f.events = evs[j:len(evs):len(evs)]
		}
	}
	return h, out
}

// exportTree is what the spans of one exported tree share.
type exportTree struct {
	src     *Source
	traceID trace.TraceID
	state   trace.TraceState
	parent  trace.SpanContext // the root's (remote) parent, if any
	links   []sdktrace.Link   // the root's
	root    *finished         // nil for ExportChildren's siblings
}

// finished is a span that ended before it was ever handed out: immutable
// data behind the ReadOnlySpan interface.
type finished struct {
	// The interface's unexported method, which keeps implementations
	// inside the SDK, is promoted from this nil field. The SDK never calls
	// it (it exists only to seal the interface); every exported method is
	// implemented below.
	sdktrace.ReadOnlySpan

	// Kept compact (what the tree shares is in h, times as Unix
	// nanoseconds): a request's spans are most of what a kept trace
	// allocates.
	h          *exportTree
	name       string
	kind       trace.SpanKind
	id         trace.SpanID
	children   int32
	start, end int64
	attrs      []attribute.KeyValue
	events     []sdktrace.Event
	status     sdktrace.Status
}

var _ sdktrace.ReadOnlySpan = (*finished)(nil)

func (f *finished) Name() string { return f.name }

// SpanContext carries the parent's flags and sampled, as the SDK's Tracer
// gives a sampled child: the W3C random flag, say, goes on down the trace.
func (f *finished) SpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: f.h.traceID, SpanID: f.id, TraceFlags: f.h.parent.TraceFlags() | trace.FlagsSampled, TraceState: f.h.state,
	})
}

func (f *finished) Parent() trace.SpanContext {
	if f.h.root == nil || f == f.h.root {
		return f.h.parent
	}
	return f.h.root.SpanContext()
}

func (f *finished) SpanKind() trace.SpanKind         { return f.kind }
func (f *finished) StartTime() time.Time             { return time.Unix(0, f.start) }
func (f *finished) EndTime() time.Time               { return time.Unix(0, f.end) }
func (f *finished) Attributes() []attribute.KeyValue { return f.attrs }
func (f *finished) Links() []sdktrace.Link {
	if f == f.h.root {
		return f.h.links
	}
	return nil
}
func (f *finished) Events() []sdktrace.Event                    { return f.events }
func (f *finished) Status() sdktrace.Status                     { return f.status }
func (f *finished) InstrumentationScope() instrumentation.Scope { return f.h.src.Scope }
func (f *finished) Resource() *resource.Resource                { return f.h.src.Resource }
func (f *finished) DroppedAttributes() int                      { return 0 }
func (f *finished) DroppedLinks() int                           { return 0 }
func (f *finished) DroppedEvents() int                          { return 0 }
func (f *finished) ChildSpanCount() int                         { return int(f.children) }

// InstrumentationLibrary is the deprecated form of InstrumentationScope,
// still part of the interface.
//
//lint:ignore SA1019 sdktrace.ReadOnlySpan still requires it
func (f *finished) InstrumentationLibrary() instrumentation.Library {
	//lint:ignore SA1019 as above
	return instrumentation.Library(f.h.src.Scope)
}
