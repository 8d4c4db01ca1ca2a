package otlpwire

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Exporter is an sdktrace.SpanExporter that encodes spans with the encoder
// of this package and uploads them with an otlptrace.Client (the SDK's
// otlptracegrpc.NewClient or otlptracehttp.NewClient). It behaves as
// otlptrace.Exporter does: the same bytes reach the backend, its errors are
// the client's, wrapped alike.
//
// ExportSpans may be called from several goroutines; each call encodes
// into a buffer of its own, reused by later calls.
type Exporter struct {
	client otlptrace.Client
	// spare is the last export's batch, kept for the next: a batch
	// processor exports from one goroutine, so its buffer, grown to a
	// batch's size once, is used again rather than regrown from nothing.
	// A sync.Pool alone would not do: a collection empties it, and
	// collections come more often than exports, so every export grew a
	// megabyte of buffer through fresh pages (a tenth of the proxy's
	// exporting cost under load; BENCHMARKS.md). Calls that find it taken
	// use bufs.
	spare atomic.Pointer[batch]
	bufs  sync.Pool // *batch

	stopOnce sync.Once
	stopErr  error
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// New starts client and returns an Exporter uploading through it.
func New(ctx context.Context, client otlptrace.Client) (*Exporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &Exporter{client: client}, nil
}

// maxKeep bounds the encoding buffer an Exporter keeps between exports.
const maxKeep = 16 << 20

// group is the spans of one resource and scope, in the order they came.
type group struct {
	res   *resource.Resource
	key   attribute.Distinct
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
	done  bool // written with an earlier group of its resource
}

// batch is one export's reusable state.
type batch struct {
	enc    encoder
	groups []group
	starts []int // where each ResourceSpans begins in enc.b
	rs     []*tracepb.ResourceSpans
}

// ExportSpans encodes spans, grouped by resource and scope as the SDK's
// exporter groups them, and uploads them in one request.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	b := e.spare.Swap(nil)
	if b == nil {
		b, _ = e.bufs.Get().(*batch)
	}
	if b == nil {
		b = &batch{}
	}
	defer e.put(b)
	b.sort(spans)
	if len(b.groups) == 0 {
		return nil
	}
	b.encode()
	if err := e.client.UploadTraces(ctx, b.rs); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// put keeps b for the next export (as the spare, when that is free),
// unless one huge batch made it huge: at most maxKeep bytes stay.
func (e *Exporter) put(b *batch) {
	if cap(b.enc.b) > maxKeep {
		return
	}
	for i := range b.groups {
		clear(b.groups[i].spans)
		b.groups[i].spans = b.groups[i].spans[:0]
		b.groups[i].res = nil
	}
	b.groups = b.groups[:0]
	b.starts = b.starts[:0]
	clear(b.rs)
	b.rs = b.rs[:0]
	b.enc.b = b.enc.b[:0]
	if !e.spare.CompareAndSwap(nil, b) {
		e.bufs.Put(b)
	}
}

// sort puts each span in its group. Batches hold few resources and scopes,
// so a linear search beats a map.
func (b *batch) sort(spans []sdktrace.ReadOnlySpan) {
	for _, s := range spans {
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		key := res.Equivalent()
		i := 0
		for i < len(b.groups) && (b.groups[i].key != key || b.groups[i].scope != scope) {
			i++
		}
		if i == len(b.groups) {
			if i < cap(b.groups) {
				b.groups = b.groups[:i+1]
				b.groups[i].spans = b.groups[i].spans[:0]
			} else {
				b.groups = append(b.groups, group{})
			}
			b.groups[i].res, b.groups[i].key, b.groups[i].scope, b.groups[i].done = res, key, scope, false
		}
		b.groups[i].spans = append(b.groups[i].spans, s)
	}
}

// encode writes one ResourceSpans per resource, its scopes in the order
// they first came, each carried as the unknown fields of an empty message.
func (b *batch) encode() {
	for i := range b.groups {
		g := &b.groups[i]
		if g.done {
			continue
		}
		b.starts = append(b.starts, len(b.enc.b))
		b.enc.resource(g.res)
		for j := i; j < len(b.groups); j++ {
			if h := &b.groups[j]; !h.done && h.key == g.key {
				b.enc.scopeSpans(h)
				h.done = true
			}
		}
		b.enc.str(rsSchemaURL, g.res.SchemaURL())
	}
	for i, start := range b.starts {
		end := len(b.enc.b)
		if i+1 < len(b.starts) {
			end = b.starts[i+1]
		}
		rs := &tracepb.ResourceSpans{}
		rs.ProtoReflect().SetUnknown(protoreflect.RawFields(b.enc.b[start:end:end]))
		b.rs = append(b.rs, rs)
	}
}

func (e *encoder) scopeSpans(g *group) {
	m := e.open(rsScopeSpans)
	e.scope(g.scope)
	for _, s := range g.spans {
		e.span(s)
	}
	e.str(ssSchemaURL, g.scope.SchemaURL)
	e.close(m)
}

// Shutdown stops the client, once; later exports fail as the client's do.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.stopOnce.Do(func() { e.stopErr = e.client.Stop(ctx) })
	return e.stopErr
}
