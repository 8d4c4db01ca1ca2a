// Package spanread reads the values reconstruction needs from a pdata span
// without copying its attributes.
package spanread

import (
	"math"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
	"github.com/llmtrace/llmtrace/reconstruct"
)

// Read fills a reconstruct.Span from sp, reported under scope.
func Read(sp ptrace.Span, scope string) reconstruct.Span {
	s := reconstruct.Span{
		Name: sp.Name(), Scope: scope,
		Start: instant(sp.StartTimestamp()), End: instant(sp.EndTimestamp()),
		Latency: reconstruct.NoLatency(), InputTokens: -1, OutputTokens: -1, CachedTokens: -1, Preemptions: -1,
		Failed: sp.Status().Code() == ptrace.StatusCodeError,
	}
	// One adapter for all attributes: boxing a value per attribute would
	// allocate per attribute.
	v := new(value)
	for k, pv := range sp.Attributes().All() {
		v.v = pv
		s.Set(k, v)
	}
	return s
}

// Expanded reports whether sp is a rebuilt child or an engine span already
// expanded: a second processor in a pipeline must not expand it again.
func Expanded(sp ptrace.Span) bool {
	a := sp.Attributes()
	if _, ok := a.Get(string(attributes.ReconstructEngine)); ok {
		return true
	}
	_, ok := a.Get(string(attributes.Reconstructed))
	return ok
}

// ErrorType is the span's error.type attribute, bounded as the names
// reconstruct reads are: cut to reconstruct.MaxNameLength bytes on a rune
// boundary, invalid UTF-8 replaced. It becomes a metric attribute, and a
// label value that is not UTF-8 is refused (the Prometheus exporter drops
// the series).
func ErrorType(sp ptrace.Span) string {
	v, ok := sp.Attributes().Get(string(attributes.ErrorType))
	if !ok || v.Type() != pcommon.ValueTypeStr {
		return ""
	}
	s, _ := textcap.Clean(v.Str(), reconstruct.MaxNameLength)
	return s
}

// instant is a timestamp, zero (absent) for the unset 0.
func instant(ts pcommon.Timestamp) time.Time {
	if ts == 0 {
		return time.Time{}
	}
	return ts.AsTime()
}

type value struct{ v pcommon.Value }

func (v *value) Float() (float64, bool) {
	switch v.v.Type() {
	case pcommon.ValueTypeDouble:
		return v.v.Double(), true
	case pcommon.ValueTypeInt:
		return float64(v.v.Int()), true
	}
	return 0, false
}

func (v *value) Int() (int64, bool) {
	switch v.v.Type() {
	case pcommon.ValueTypeInt:
		return v.v.Int(), true
	case pcommon.ValueTypeDouble:
		if f := v.v.Double(); f >= math.MinInt64 && f <= math.MaxInt64 {
			return int64(f), true
		}
	}
	return 0, false
}

func (v *value) Str() (string, bool) {
	if v.v.Type() == pcommon.ValueTypeStr {
		return v.v.Str(), true
	}
	return "", false
}

func (v *value) FirstStr() (string, bool) {
	if v.v.Type() == pcommon.ValueTypeSlice {
		if sl := v.v.Slice(); sl.Len() > 0 && sl.At(0).Type() == pcommon.ValueTypeStr {
			return sl.At(0).Str(), true
		}
	}
	return "", false
}
