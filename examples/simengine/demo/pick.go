package demo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/examples/simengine/waterfall"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelstats"
)

// reservoirSize bounds the candidates for the "typical" waterfall.
const reservoirSize = 32

type candidate struct {
	stats otelstats.RequestStats
	spans []sdktrace.ReadOnlySpan
}

// picker chooses the requests to draw as requests finish, keeping only the
// spans of its current choices (and of a small reservoir), so memory stays
// bounded however long the run: the slowest TTFT, the preempted request
// with the longest preemption (preferring one with two decode segments),
// and, at the end, the reservoir's request closest to the median TTFT and
// e2e latency.
type picker struct {
	cap       *waterfall.Capture
	slowest   *candidate
	preempted *candidate
	preSegs   int
	reservoir []*candidate
	seen      int
	rng       *rand.Rand
}

func newPicker(c *waterfall.Capture, seed uint64) *picker {
	return &picker{cap: c, rng: rand.New(rand.NewPCG(seed, 0x7069636b))}
}

func (p *picker) observe(s *otelstats.RequestStats) {
	var tid trace.TraceID
	if id, err := trace.TraceIDFromHex(s.TraceID); err == nil {
		tid = id
	}
	spans := p.cap.Take(tid)
	if len(spans) == 0 {
		return // not sampled
	}
	c := &candidate{stats: *s, spans: spans}
	c.stats.OutputTokenLatencies = nil // not needed, not retained
	if s.FirstTokenLatency.Valid && (p.slowest == nil || s.FirstTokenLatency.Value > p.slowest.stats.FirstTokenLatency.Value) {
		p.slowest = c
	}
	if s.NumPreemptions > 0 {
		segs := countNamed(spans, attributes.SpanDecode)
		better := p.preempted == nil ||
			min(segs, 2) > min(p.preSegs, 2) ||
			(min(segs, 2) == min(p.preSegs, 2) && s.PreemptedDuration > p.preempted.stats.PreemptedDuration)
		if better {
			p.preempted, p.preSegs = c, segs
		}
	}
	if s.NumPreemptions == 0 && s.FirstTokenLatency.Valid && s.ErrorType == "" {
		p.seen++
		if len(p.reservoir) < reservoirSize {
			p.reservoir = append(p.reservoir, c)
		} else if j := p.rng.IntN(p.seen); j < reservoirSize {
			p.reservoir[j] = c
		}
	}
}

func countNamed(spans []sdktrace.ReadOnlySpan, name string) int {
	n := 0
	for _, s := range spans {
		if s.Name() == name {
			n++
		}
	}
	return n
}

// waterfalls lays out the chosen requests.
func (p *picker) waterfalls(col *summary.Collector) []*waterfall.Waterfall {
	var out []*waterfall.Waterfall
	used := map[string]bool{}
	add := func(title string, c *candidate) {
		if c == nil || used[c.stats.RequestID] {
			return
		}
		w, err := waterfall.FromSpans(c.spans)
		if err != nil {
			return
		}
		used[c.stats.RequestID] = true
		w.Title, w.Note = title, note(&c.stats)
		out = append(out, w)
	}
	add("slowest TTFT", p.slowest)
	add("a preempted request", p.preempted)
	add("a typical request", p.typical(col, used))
	return out
}

// typical is the reservoir's request nearest the median TTFT and e2e, in
// log distance.
func (p *picker) typical(col *summary.Collector, used map[string]bool) *candidate {
	mt, ok1 := summary.Percentile(col.TTFT, 50)
	me, ok2 := summary.Percentile(col.E2E, 50)
	if !ok1 || !ok2 || mt <= 0 || me <= 0 {
		return nil
	}
	var best *candidate
	bestD := math.Inf(1)
	for _, c := range slices.Clone(p.reservoir) {
		if used[c.stats.RequestID] || !c.stats.E2ELatency.Valid {
			continue
		}
		t, e := c.stats.FirstTokenLatency.Value.Seconds(), c.stats.E2ELatency.Value.Seconds()
		if t <= 0 || e <= 0 {
			continue
		}
		d := math.Abs(math.Log(t/mt)) + math.Abs(math.Log(e/me))
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func note(s *otelstats.RequestStats) string {
	d := func(l otelstats.Latency) string {
		if !l.Valid {
			return "-"
		}
		return waterfall.Dur(l.Value)
	}
	n := fmt.Sprintf("TTFT %s, queue %s, TPOT %s, e2e %s; %d prompt tokens",
		d(s.FirstTokenLatency), d(s.QueueDuration), d(s.TimePerOutputToken), d(s.E2ELatency), s.NumPromptTokens.N)
	if s.NumCachedTokens.Valid && s.NumCachedTokens.N > 0 {
		n += fmt.Sprintf(" (%d cached)", s.NumCachedTokens.N)
	}
	n += fmt.Sprintf(", %d output tokens", s.NumOutputTokens)
	if s.NumPreemptions > 0 {
		n += fmt.Sprintf(", %d preemption(s), %s preempted", s.NumPreemptions, waterfall.Dur(s.PreemptedDuration.Round(time.Microsecond)))
	}
	return n
}
