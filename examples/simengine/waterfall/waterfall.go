package waterfall

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// Phase classifies a span for drawing.
type Phase string

// Phases, one colour and glyph each.
const (
	PhaseRequest    Phase = "request"
	PhaseInput      Phase = "input"
	PhaseHandoff    Phase = "handoff"
	PhaseQueue      Phase = "queue"
	PhasePreempted  Phase = "preempted"
	PhasePrefill    Phase = "prefill"
	PhaseRecompute  Phase = "recompute"
	PhaseDecode     Phase = "decode"
	PhaseDetokenize Phase = "detokenize"
	PhaseKVTransfer Phase = "kv_transfer"
	PhaseEncode     Phase = "encode"
	PhaseOther      Phase = "other"
)

// Waterfall is one request's trace laid out for drawing.
type Waterfall struct {
	// Title says why this request was picked ("slowest TTFT", …).
	Title     string
	RequestID string
	TraceID   string
	// Note is a one-line summary of the request's numbers.
	Note  string
	Start time.Time
	Total time.Duration
	Rows  []Row
}

// Row is one span.
type Row struct {
	Name   string // the span's name
	Label  string // name plus what distinguishes it (queue reason, segment, …)
	Phase  Phase
	Depth  int
	Offset time.Duration // from the root's start
	Dur    time.Duration
	// Marks are offsets of span events (further prefill chunks).
	Marks []time.Duration
}

// FromSpans lays out one trace's spans: the root first, then its
// descendants depth first, siblings in start order.
func FromSpans(spans []sdktrace.ReadOnlySpan) (*Waterfall, error) {
	if len(spans) == 0 {
		return nil, errors.New("waterfall: no spans")
	}
	var root sdktrace.ReadOnlySpan
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	for _, s := range spans {
		if !s.Parent().IsValid() || !ids[s.Parent().SpanID()] {
			if root != nil {
				return nil, errors.New("waterfall: more than one root span")
			}
			root = s
		}
	}
	if root == nil {
		return nil, errors.New("waterfall: no root span")
	}
	w := &Waterfall{
		TraceID: root.SpanContext().TraceID().String(),
		Start:   root.StartTime(),
		Total:   root.EndTime().Sub(root.StartTime()),
	}
	if v, ok := attr(root.Attributes(), attributes.RequestID); ok {
		w.RequestID = v.AsString()
	}
	// Depth first: each span's children in start order, except that
	// detokenization, which runs alongside the decode segments from the
	// first token to the last, comes last among its siblings. A P/D trace
	// nests the instances' request trees under the router's root.
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s != root {
			kids[s.Parent().SpanID()] = append(kids[s.Parent().SpanID()], s)
		}
	}
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		w.Rows = append(w.Rows, row(s, w.Start, depth))
		ks := kids[s.SpanContext().SpanID()]
		slices.SortStableFunc(ks, func(a, b sdktrace.ReadOnlySpan) int {
			da, db := phaseOf(a) == PhaseDetokenize, phaseOf(b) == PhaseDetokenize
			if da != db {
				if da {
					return 1
				}
				return -1
			}
			if c := a.StartTime().Compare(b.StartTime()); c != 0 {
				return c
			}
			return phaseOrder(phaseOf(a)) - phaseOrder(phaseOf(b))
		})
		for _, k := range ks {
			walk(k, depth+1)
		}
	}
	walk(root, 0)
	return w, nil
}

func attr(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func phaseOf(s sdktrace.ReadOnlySpan) Phase {
	a := s.Attributes()
	switch s.Name() {
	case attributes.SpanInputProcessing:
		return PhaseInput
	case attributes.SpanHandoff:
		return PhaseHandoff
	case attributes.SpanQueue:
		if v, ok := attr(a, attributes.QueueReason); ok && v.AsString() == attributes.QueueReasonPreempted {
			return PhasePreempted
		}
		return PhaseQueue
	case attributes.SpanPrefill:
		if v, ok := attr(a, attributes.PrefillRecompute); ok && v.AsBool() {
			return PhaseRecompute
		}
		return PhasePrefill
	case attributes.SpanDecode:
		return PhaseDecode
	case attributes.SpanDetokenize:
		return PhaseDetokenize
	case attributes.SpanKVTransfer:
		return PhaseKVTransfer
	case attributes.SpanEncode:
		return PhaseEncode
	}
	if s.SpanKind() == trace.SpanKindServer {
		return PhaseRequest
	}
	return PhaseOther
}

func phaseOrder(p Phase) int {
	return slices.Index([]Phase{PhaseRequest, PhaseInput, PhaseHandoff, PhaseQueue, PhaseKVTransfer, PhaseEncode, PhasePrefill, PhaseDecode,
		PhasePreempted, PhaseRecompute, PhaseDetokenize, PhaseOther}, p)
}

func row(s sdktrace.ReadOnlySpan, t0 time.Time, depth int) Row {
	r := Row{
		Name:   s.Name(),
		Label:  s.Name(),
		Phase:  phaseOf(s),
		Depth:  depth,
		Offset: s.StartTime().Sub(t0),
		Dur:    max(s.EndTime().Sub(s.StartTime()), 0),
	}
	r.Label += label(r.Phase, s)
	for _, ev := range s.Events() {
		r.Marks = append(r.Marks, ev.Time.Sub(t0))
	}
	return r
}

// label is what distinguishes a span of its phase: the queue's reason, a
// prefill's tokens, a decode segment's number and tokens, a transfer's
// size, an encoder run's images, an instance's part in P/D.
func label(p Phase, s sdktrace.ReadOnlySpan) string {
	a := s.Attributes()
	switch p {
	case PhaseRequest:
		var tags []string
		if v, ok := attr(a, attributes.PDRole); ok {
			tags = append(tags, v.AsString())
		} else if _, ok := attr(a, attributes.PDPrefillDuration); ok {
			tags = append(tags, "router")
		}
		if v, ok := attr(a, attributes.LoRAAdapter); ok {
			tags = append(tags, "lora "+v.AsString())
		}
		if len(tags) > 0 {
			return " [" + strings.Join(tags, ", ") + "]"
		}
	case PhaseQueue:
		reason := attributes.QueueReasonNew
		if v, ok := attr(a, attributes.QueueReason); ok {
			reason = v.AsString()
		}
		return " (" + reason + ")"
	case PhasePreempted:
		return " (preempted)"
	case PhasePrefill, PhaseRecompute:
		return paren(prefillLabel(p, a))
	case PhaseDecode:
		seg, _ := intAttr(a, attributes.DecodeSegment)
		return fmt.Sprintf(" #%d", seg) + paren(decodeLabel(a))
	case PhaseKVTransfer:
		return paren(transferLabel(s, a))
	case PhaseEncode:
		return paren(encodeLabel(a))
	}
	return ""
}

func intAttr(a []attribute.KeyValue, k attribute.Key) (int64, bool) {
	v, ok := attr(a, k)
	return v.AsInt64(), ok
}

func paren(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func prefillLabel(p Phase, a []attribute.KeyValue) []string {
	var extra []string
	if p == PhaseRecompute {
		extra = append(extra, "recompute")
	}
	if n, ok := intAttr(a, attributes.PrefillComputedTokens); ok {
		tok := fmt.Sprintf("%d tok", n)
		if c, ok := intAttr(a, attributes.PrefillCachedTokens); ok && c > 0 {
			tok += fmt.Sprintf(", %d cached", c)
		}
		if c, ok := intAttr(a, attributes.PrefillRemoteTokens); ok && c > 0 {
			tok += fmt.Sprintf(", %d remote", c)
		}
		extra = append(extra, tok)
	}
	if n, ok := intAttr(a, attributes.PrefillChunks); ok && n > 1 {
		extra = append(extra, fmt.Sprintf("%d chunks", n))
	}
	return extra
}

func decodeLabel(a []attribute.KeyValue) []string {
	var extra []string
	if n, ok := intAttr(a, attributes.DecodeOutputTokens); ok {
		extra = append(extra, fmt.Sprintf("%d tok", n))
	}
	if d, ok := intAttr(a, attributes.SpecDraftTokens); ok && d > 0 {
		acc, _ := intAttr(a, attributes.SpecAcceptedTokens)
		extra = append(extra, fmt.Sprintf("%d/%d draft accepted", acc, d))
	}
	return extra
}

func transferLabel(s sdktrace.ReadOnlySpan, a []attribute.KeyValue) []string {
	var extra []string
	if s.Status().Code == codes.Error {
		extra = append(extra, "FAILED")
	} else if n, ok := intAttr(a, attributes.KVTransferTokens); ok {
		extra = append(extra, fmt.Sprintf("%d tok", n))
		if b, ok := intAttr(a, attributes.KVTransferBytes); ok && b > 0 {
			extra = append(extra, fmt.Sprintf("%.1f MB", float64(b)/1e6))
		}
	}
	if v, ok := attr(a, attributes.KVTransferSource); ok {
		extra = append(extra, "from "+v.AsString())
	}
	return extra
}

func encodeLabel(a []attribute.KeyValue) []string {
	var extra []string
	if n, ok := intAttr(a, attributes.EncodeItems); ok {
		extra = append(extra, fmt.Sprintf("%d item(s)", n))
	}
	if n, ok := intAttr(a, attributes.EncodeTokens); ok {
		extra = append(extra, fmt.Sprintf("%d tok", n))
	}
	if v, ok := attr(a, attributes.EncodeCacheHit); ok && v.AsBool() {
		extra = append(extra, "cache hit")
	}
	return extra
}

// Glyph is the bar character of a phase on the terminal.
func Glyph(p Phase) rune {
	switch p {
	case PhaseRequest:
		return '─'
	case PhaseInput, PhaseDetokenize:
		return '▒'
	case PhaseHandoff:
		return '┄'
	case PhaseQueue:
		return '░'
	case PhasePreempted:
		return '╳'
	case PhasePrefill, PhaseRecompute:
		return '▓'
	case PhaseDecode:
		return '█'
	case PhaseKVTransfer:
		return '≈'
	case PhaseEncode:
		return '◆'
	}
	return '▪'
}

// Legend explains the glyphs.
const Legend = "─ request  ▒ input/detokenize  ┄ handoff  ░ queued  ╳ preempted  ▓ prefill  █ decode  ≈ KV transfer  ◆ encode"

// Text draws w on a terminal: one line per span with its offset from the
// request's arrival, its duration and a bar barWidth characters wide for the
// whole request.
func (w *Waterfall) Text(out io.Writer, barWidth int) {
	barWidth = max(barWidth, 10)
	labelW := 0
	for _, r := range w.Rows {
		labelW = max(labelW, 2*r.Depth+len([]rune(r.Label)))
	}
	fmt.Fprintf(out, "%s — %s, trace %s\n", w.Title, w.RequestID, w.TraceID)
	if w.Note != "" {
		fmt.Fprintf(out, "  %s\n", w.Note)
	}
	for _, r := range w.Rows {
		label := strings.Repeat("  ", r.Depth) + r.Label
		pad := labelW - len([]rune(label))
		fmt.Fprintf(out, "  %s%s %10s %10s  |%s|\n", label, strings.Repeat(" ", pad),
			"+"+Dur(r.Offset), Dur(r.Dur), w.bar(r, barWidth))
	}
}

// bar draws r's extent on a barWidth-wide track; any span gets at least one
// cell so short phases stay visible.
func (w *Waterfall) bar(r Row, width int) string {
	cells := make([]rune, width)
	for i := range cells {
		cells[i] = ' '
	}
	if w.Total <= 0 {
		cells[0] = Glyph(r.Phase)
		return string(cells)
	}
	scale := float64(width) / float64(w.Total)
	from := int(math.Floor(float64(r.Offset) * scale))
	to := int(math.Ceil(float64(r.Offset+r.Dur) * scale))
	from = min(max(from, 0), width-1)
	to = min(max(to, from+1), width)
	g := Glyph(r.Phase)
	for i := from; i < to; i++ {
		cells[i] = g
	}
	return string(cells)
}

// Dur formats a duration compactly: µs below a millisecond, ms with one
// decimal below a second, seconds with three decimals above.
func Dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + Dur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3fs", d.Seconds())
	}
}
