// Package otlpwire writes finished spans straight to OTLP's protobuf wire
// format and hands them to the SDK's own OTLP clients.
//
// The SDK's OTLP exporter first converts every span into a tree of
// generated protobuf structs (about 34 allocations a span, three for each
// attribute) and then marshals the tree. The encoder here appends the same
// bytes to one reused buffer: what reaches the backend is the message
// tracetransform would have built (TestSameAsSDK decodes both and compares
// them), without the structs.
//
// One difference, on purpose: a string that is not valid UTF-8 goes out
// with U+FFFD in place of each run of invalid bytes, where the SDK's
// exporter fails the whole batch (proto.Marshal refuses it), so one hostile
// header or body cannot cost every other request its trace.
//
// The bytes travel to the client as the unknown fields of an otherwise
// empty tracepb.ResourceSpans, which proto.Marshal copies verbatim, so the
// client — endpoints, headers, TLS, compression, retries, gRPC or HTTP, as
// OTEL_EXPORTER_OTLP_* configure them — is the SDK's, unchanged.
package otlpwire

import (
	"math"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of opentelemetry/proto/trace/v1, common/v1 and
// resource/v1 (OTLP 1.x; stable).
const (
	rsResource, rsScopeSpans, rsSchemaURL = 1, 2, 3
	ssScope, ssSpans, ssSchemaURL         = 1, 2, 3

	spTraceID, spSpanID, spTraceState, spParent, spName, spKind = 1, 2, 3, 4, 5, 6
	spStart, spEnd, spAttrs, spDroppedAttrs, spEvents           = 7, 8, 9, 10, 11
	spDroppedEvents, spLinks, spDroppedLinks, spStatus, spFlags = 12, 13, 14, 15, 16

	evTime, evName, evAttrs, evDropped                            = 1, 2, 3, 4
	lkTraceID, lkSpanID, lkAttrs, lkDropped, lkFlags              = 1, 2, 4, 5, 6
	stMessage, stCode                                             = 2, 3
	resAttrs                                                      = 1
	scName, scVersion, scAttrs                                    = 1, 2, 3
	kvKey, kvValue                                                = 1, 2
	avString, avBool, avInt, avDouble, avArray, avKVList, avBytes = 1, 2, 3, 4, 5, 6, 7
	listValues                                                    = 1

	// SpanFlags: the low 8 bits are the W3C trace flags.
	flagHasIsRemote, flagIsRemote = 0x100, 0x200
)

// encoder appends protobuf fields to b. A nested message is opened with
// one byte for its length, written when it is closed; a message of 128
// bytes or more moves its body up to make room for the longer varint.
type encoder struct{ b []byte }

func (e *encoder) open(f protowire.Number) int {
	e.b = protowire.AppendTag(e.b, f, protowire.BytesType)
	e.b = append(e.b, 0)
	return len(e.b)
}

func (e *encoder) close(start int) {
	n := len(e.b) - start
	if n < 0x80 {
		e.b[start-1] = byte(n)
		return
	}
	k := protowire.SizeVarint(uint64(n))
	for i := 1; i < k; i++ {
		e.b = append(e.b, 0)
	}
	copy(e.b[start+k-1:], e.b[start:start+n])
	protowire.AppendVarint(e.b[:start-1], uint64(n))
}

func (e *encoder) bytes(f protowire.Number, v []byte) {
	e.b = protowire.AppendTag(e.b, f, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, v)
}

// str writes a string field, proto3-style: omitted when empty.
func (e *encoder) str(f protowire.Number, s string) {
	if s != "" {
		e.text(f, s)
	}
}

// text writes a string field. Protobuf strings are UTF-8: an invalid
// sequence (a header or a body from outside can carry one) is written as
// U+FFFD, where proto.Marshal would fail the whole batch for it.
func (e *encoder) text(f protowire.Number, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	e.b = protowire.AppendTag(e.b, f, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *encoder) varint(f protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, f, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, v)
	}
}

func (e *encoder) fixed64(f protowire.Number, v uint64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, f, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, v)
	}
}

func (e *encoder) fixed32(f protowire.Number, v uint32) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, f, protowire.Fixed32Type)
		e.b = protowire.AppendFixed32(e.b, v)
	}
}

// resource writes ResourceSpans.resource; a nil resource has none.
func (e *encoder) resource(r *resource.Resource) {
	if r == nil {
		return
	}
	m := e.open(rsResource)
	for it := r.Iter(); it.Next(); {
		e.keyValue(resAttrs, it.Attribute())
	}
	e.close(m)
}

// scope writes ScopeSpans.scope; the zero scope has none.
func (e *encoder) scope(s instrumentation.Scope) {
	if s == (instrumentation.Scope{}) {
		return
	}
	m := e.open(ssScope)
	e.str(scName, s.Name)
	e.str(scVersion, s.Version)
	for it := s.Attributes.Iter(); it.Next(); {
		e.keyValue(scAttrs, it.Attribute())
	}
	e.close(m)
}

// span writes one ScopeSpans.spans entry.
func (e *encoder) span(s sdktrace.ReadOnlySpan) {
	m := e.open(ssSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(spTraceID, tid[:])
	e.bytes(spSpanID, sid[:])
	e.str(spTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(spParent, psid[:])
	}
	e.str(spName, s.Name())
	e.varint(spKind, spanKind(s.SpanKind()))
	e.fixed64(spStart, unixNano(s.StartTime().UnixNano()))
	e.fixed64(spEnd, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		e.keyValue(spAttrs, kv)
	}
	e.varint(spDroppedAttrs, count(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		e.event(ev)
	}
	e.varint(spDroppedEvents, count(s.DroppedEvents()))
	for _, l := range s.Links() {
		e.link(l)
	}
	e.varint(spDroppedLinks, count(s.DroppedLinks()))
	e.status(s.Status())
	e.fixed32(spFlags, flags(sc.TraceFlags(), parent))
	e.close(m)
}

func (e *encoder) event(ev sdktrace.Event) {
	m := e.open(spEvents)
	e.fixed64(evTime, unixNano(ev.Time.UnixNano()))
	e.str(evName, ev.Name)
	for _, kv := range ev.Attributes {
		e.keyValue(evAttrs, kv)
	}
	e.varint(evDropped, count(ev.DroppedAttributeCount))
	e.close(m)
}

// link writes a link as the SDK's exporter does (without its trace state).
func (e *encoder) link(l sdktrace.Link) {
	m := e.open(spLinks)
	tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
	e.bytes(lkTraceID, tid[:])
	e.bytes(lkSpanID, sid[:])
	for _, kv := range l.Attributes {
		e.keyValue(lkAttrs, kv)
	}
	e.varint(lkDropped, count(l.DroppedAttributeCount))
	e.fixed32(lkFlags, flags(l.SpanContext.TraceFlags(), l.SpanContext))
	e.close(m)
}

// status is always present, as the SDK's exporter writes it.
func (e *encoder) status(s sdktrace.Status) {
	m := e.open(spStatus)
	e.str(stMessage, s.Description)
	var c uint64 // STATUS_CODE_UNSET
	switch s.Code {
	case codes.Ok:
		c = 1
	case codes.Error:
		c = 2
	}
	e.varint(stCode, c)
	e.close(m)
}

func (e *encoder) keyValue(f protowire.Number, kv attribute.KeyValue) {
	m := e.open(f)
	e.str(kvKey, string(kv.Key))
	v := e.open(kvValue)
	e.value(kv.Value)
	e.close(v)
	e.close(m)
}

// value writes an AnyValue's one field. A oneof member is written even when
// it holds its zero value; an EMPTY value writes nothing.
func (e *encoder) value(v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL:
		e.b = protowire.AppendTag(e.b, avBool, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.b = protowire.AppendTag(e.b, avInt, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.b = protowire.AppendTag(e.b, avDouble, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		e.text(avString, v.AsString())
	case attribute.BYTESLICE:
		e.bytes(avBytes, v.AsByteSlice())
	case attribute.EMPTY:
	case attribute.MAP:
		m := e.open(avKVList)
		for _, kv := range v.AsMap() {
			e.keyValue(listValues, kv)
		}
		e.close(m)
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE, attribute.STRINGSLICE, attribute.SLICE:
		e.array(v)
	default:
		e.text(avString, "INVALID")
	}
}

// array writes a slice value as an ArrayValue of one AnyValue per element.
func (e *encoder) array(v attribute.Value) {
	m := e.open(avArray)
	elem := func(x attribute.Value) {
		a := e.open(listValues)
		e.value(x)
		e.close(a)
	}
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, x := range v.AsBoolSlice() {
			elem(attribute.BoolValue(x))
		}
	case attribute.INT64SLICE:
		for _, x := range v.AsInt64Slice() {
			elem(attribute.Int64Value(x))
		}
	case attribute.FLOAT64SLICE:
		for _, x := range v.AsFloat64Slice() {
			elem(attribute.Float64Value(x))
		}
	case attribute.STRINGSLICE:
		for _, x := range v.AsStringSlice() {
			elem(attribute.StringValue(x))
		}
	default:
		for _, x := range v.AsSlice() {
			elem(x)
		}
	}
	e.close(m)
}

func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal, trace.SpanKindServer, trace.SpanKindClient, trace.SpanKindProducer, trace.SpanKindConsumer:
		return uint64(k) // OTLP's SpanKind numbers are the API's
	}
	return 0
}

// flags are the W3C trace flags and whether the parent is remote.
func flags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func count(n int) uint64 { return uint64(min(max(0, int64(n)), math.MaxUint32)) }
