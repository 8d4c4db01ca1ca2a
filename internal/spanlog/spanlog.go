// Package spanlog writes ended spans as JSON lines: a dump for tests,
// examples and debugging without a tracing backend.
//
// One object per span:
//
//	{"trace_id":"…","span_id":"…","parent_span_id":"…","name":"llm.queue","kind":"internal",
//	 "start_ns":1700000000001000000,"end_ns":1700000000004000000,"status":"error","status_description":"abort",
//	 "attributes":{"llm.queue.reason":"new"},"events":[{"name":"…","time_ns":…,"attributes":{…}}]}
//
// parent_span_id, status and events are omitted when empty. A float JSON
// has no number for is a string ("NaN", "Infinity", "-Infinity"), a map
// attribute an object, and strings are valid UTF-8 (U+FFFD for bad bytes).
package spanlog

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"slices"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/internal/lineout"
)

// Span is one line of the dump.
type Span struct {
	TraceID           string         `json:"trace_id"`
	SpanID            string         `json:"span_id"`
	ParentSpanID      string         `json:"parent_span_id,omitempty"`
	Name              string         `json:"name"`
	Kind              string         `json:"kind"`
	StartNs           int64          `json:"start_ns"`
	EndNs             int64          `json:"end_ns"`
	Status            string         `json:"status,omitempty"`
	StatusDescription string         `json:"status_description,omitempty"`
	Attributes        map[string]any `json:"attributes,omitempty"`
	Events            []Event        `json:"events,omitempty"`
}

// Event is a span event of the dump.
type Event struct {
	Name       string         `json:"name"`
	TimeNs     int64          `json:"time_ns"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Processor is an sdktrace.SpanProcessor that writes every ended span to w,
// one JSON line each. Lines are buffered and reach w within a second
// (lineout.FlushDelay), so a long-running command's dump can be tailed. It
// is safe for concurrent use.
type Processor struct {
	w *lineout.Writer
	// unwritable counts spans json.Marshal refused, which value is
	// there to make none.
	unwritable atomic.Int64
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// New writes to w; Shutdown closes w when it is an io.Closer and close is
// set.
func New(w io.Writer, close bool) *Processor {
	return &Processor{w: lineout.New(w, close, 0)}
}

// WaitWhenFull has the spans that end from now until ctx ends wait for the
// file rather than be dropped when it lags (lineout.Writer.WaitWhenFull):
// for a command's exit, when nothing serves requests any more. A nil
// Processor does nothing.
func (p *Processor) WaitWhenFull(ctx context.Context) {
	if p != nil {
		p.w.WaitWhenFull(ctx)
	}
}

// OnStart does nothing.
func (p *Processor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd writes s.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	b, err := json.Marshal(FromReadOnly(s))
	if err != nil {
		p.unwritable.Add(1)
		return
	}
	_, _ = p.w.Write(append(b, '\n'))
}

// FromReadOnly converts an SDK span.
func FromReadOnly(s sdktrace.ReadOnlySpan) Span {
	sc := s.SpanContext()
	out := Span{
		TraceID: sc.TraceID().String(),
		SpanID:  sc.SpanID().String(),
		Name:    s.Name(),
		Kind:    s.SpanKind().String(),
		StartNs: s.StartTime().UnixNano(),
		EndNs:   s.EndTime().UnixNano(),
	}
	if p := s.Parent(); p.IsValid() {
		out.ParentSpanID = p.SpanID().String()
	}
	if st := s.Status(); st.Code != codes.Unset {
		out.Status = st.Code.String()
		out.StatusDescription = st.Description
	}
	out.Attributes = attrs(s.Attributes())
	for _, e := range s.Events() {
		out.Events = append(out.Events, Event{Name: e.Name, TimeNs: e.Time.UnixNano(), Attributes: attrs(e.Attributes)})
	}
	return out
}

func attrs(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	return object(kvs)
}

func object(kvs []attribute.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = value(kv.Value)
	}
	return m
}

// value is v as encoding/json can write it. JSON has no number for NaN
// or ±Inf, and json.Marshal refuses the whole span for one: such a float
// is written as the string OpenTelemetry's representation outside OTLP
// gives it ("NaN", "Infinity", "-Infinity"), in slices and maps as well.
// A map is a JSON object and a slice an array, as that representation has
// them.
func value(v attribute.Value) any {
	switch v.Type() {
	case attribute.FLOAT64:
		return float(v.AsFloat64())
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		if !slices.ContainsFunc(fs, nonFinite) {
			return fs
		}
		out := make([]any, len(fs))
		for i, f := range fs {
			out[i] = float(f)
		}
		return out
	case attribute.SLICE:
		vs := v.AsSlice()
		out := make([]any, len(vs))
		for i, x := range vs {
			out[i] = value(x)
		}
		return out
	case attribute.MAP:
		return object(v.AsMap())
	}
	return v.AsInterface()
}

func nonFinite(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

func float(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// ForceFlush writes what is buffered.
func (p *Processor) ForceFlush(ctx context.Context) error { return p.w.Flush(ctx) }

// Shutdown flushes and, when New was told to, closes the writer.
func (p *Processor) Shutdown(ctx context.Context) error { return p.w.Close(ctx) }

// Dropped is how many spans' lines were dropped because the writer did not
// keep up (lineout.MaxPending) or, which should never happen, because
// json.Marshal refused the span.
func (p *Processor) Dropped() int64 {
	if p == nil {
		return 0
	}
	return p.w.Dropped() + p.unwritable.Load()
}

// Read parses a dump.
func Read(r io.Reader) ([]Span, error) {
	var out []Span
	d := json.NewDecoder(r)
	for {
		var s Span
		if err := d.Decode(&s); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, s)
	}
}
