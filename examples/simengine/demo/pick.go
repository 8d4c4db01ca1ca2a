package demo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
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

// candidate is one client request: the client's view (the engine's, or
// the router's in P/D), the P/D instances' views, and its trace's spans.
type candidate struct {
	stats otelstats.RequestStats
	parts []otelstats.RequestStats
	spans []sdktrace.ReadOnlySpan

	preemptions  int
	preempted    time.Duration
	segs         int  // most decode segments of one instance
	kvFailed     bool // a failed KV transfer
	encodeDuring bool // an encoder run started after its prefill did
}

// picker chooses the requests to draw as requests finish, keeping only the
// spans of its current choices (and of a small reservoir), so memory stays
// bounded however long the run: the slowest TTFT, the preempted request
// with the longest preemption (preferring one with two decode segments), a
// failed KV transfer (P/D), an image encoded during prefill, and, at the
// end, the reservoir's request closest to the median TTFT and e2e latency.
type picker struct {
	cap       *waterfall.Capture
	slowest   *candidate
	preempted *candidate
	kvFailed  *candidate
	during    *candidate
	reservoir []*candidate
	seen      int
	rng       *rand.Rand
}

func newPicker(c *waterfall.Capture, seed uint64) *picker {
	return &picker{cap: c, rng: rand.New(rand.NewPCG(seed, 0x7069636b))}
}

// observe sees a finished client request whose every part has finished.
func (p *picker) observe(s *otelstats.RequestStats, parts []otelstats.RequestStats) {
	var tid trace.TraceID
	if id, err := trace.TraceIDFromHex(s.TraceID); err == nil {
		tid = id
	}
	spans := p.cap.Take(tid)
	if len(spans) == 0 || !s.Sampled {
		return // not sampled
	}
	c := &candidate{stats: *s, parts: parts, spans: spans}
	c.stats.OutputTokenLatencies = nil // not needed, not retained
	c.describe()
	p.consider(c)
}

// consider keeps c where it beats the current choice.
func (p *picker) consider(c *candidate) {
	s := &c.stats
	if s.FirstTokenLatency.Valid && (p.slowest == nil || s.FirstTokenLatency.Value > p.slowest.stats.FirstTokenLatency.Value) {
		p.slowest = c
	}
	if c.preemptions > 0 && (p.preempted == nil || c.betterPreempted(p.preempted)) {
		p.preempted = c
	}
	if c.kvFailed && s.ErrorType == "" && (p.kvFailed == nil || s.FirstTokenLatency.Value < p.kvFailed.stats.FirstTokenLatency.Value) {
		p.kvFailed = c
	}
	if c.encodeDuring && c.preemptions == 0 && (p.during == nil || s.E2ELatency.Value < p.during.stats.E2ELatency.Value) {
		p.during = c
	}
	if c.preemptions == 0 && !c.kvFailed && s.FirstTokenLatency.Valid && s.ErrorType == "" {
		p.seen++
		if len(p.reservoir) < reservoirSize {
			p.reservoir = append(p.reservoir, c)
		} else if j := p.rng.IntN(p.seen); j < reservoirSize {
			p.reservoir[j] = c
		}
	}
}

// betterPreempted prefers two decode segments, then the longer preemption.
func (c *candidate) betterPreempted(o *candidate) bool {
	if a, b := min(c.segs, 2), min(o.segs, 2); a != b {
		return a > b
	}
	return c.preempted > o.preempted
}

// describe derives what the choices look at from the views and spans.
func (c *candidate) describe() {
	views := append([]otelstats.RequestStats{c.stats}, c.parts...)
	for i := range views {
		c.preemptions += views[i].NumPreemptions
		c.preempted += views[i].PreemptedDuration
		c.kvFailed = c.kvFailed || views[i].KVTransferFailed
	}
	segs := map[trace.SpanID]int{}
	prefill := map[trace.SpanID]time.Time{}
	for _, s := range c.spans {
		switch s.Name() {
		case attributes.SpanDecode:
			segs[s.Parent().SpanID()]++
		case attributes.SpanPrefill:
			if t, ok := prefill[s.Parent().SpanID()]; !ok || s.StartTime().Before(t) {
				prefill[s.Parent().SpanID()] = s.StartTime()
			}
		}
	}
	for _, n := range segs {
		c.segs = max(c.segs, n)
	}
	for _, s := range c.spans {
		if t, ok := prefill[s.Parent().SpanID()]; ok && s.Name() == attributes.SpanEncode && s.StartTime().After(t) {
			c.encodeDuring = true
		}
	}
}

// waterfalls lays out the chosen requests.
func (p *picker) waterfalls(col *summary.Collector) []*waterfall.Waterfall {
	var out []*waterfall.Waterfall
	used := map[string]bool{}
	add := func(title string, c *candidate) {
		if c == nil || used[c.stats.TraceID] {
			return
		}
		w, err := waterfall.FromSpans(c.spans)
		if err != nil {
			return
		}
		used[c.stats.TraceID] = true
		w.Title, w.Note = title, note(c)
		out = append(out, w)
	}
	add("slowest TTFT", p.slowest)
	add("a preempted request", p.preempted)
	add("a failed KV transfer, recomputed on the decode instance", p.kvFailed)
	add("an image encoded during prefill", p.during)
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
		if used[c.stats.TraceID] || !c.stats.E2ELatency.Valid {
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

func lat(l otelstats.Latency) string {
	if !l.Valid {
		return "-"
	}
	return waterfall.Dur(l.Value)
}

// note is a one-line (two in P/D) summary of a request's numbers.
func note(c *candidate) string {
	s := &c.stats
	var b strings.Builder
	fmt.Fprintf(&b, "TTFT %s, queue %s, TPOT %s, e2e %s; %d prompt tokens",
		lat(s.FirstTokenLatency), lat(s.QueueDuration), lat(s.TimePerOutputToken), lat(s.E2ELatency), s.NumPromptTokens.N)
	if s.NumCachedTokens.Valid && s.NumCachedTokens.N > 0 {
		fmt.Fprintf(&b, " (%d cached)", s.NumCachedTokens.N)
	}
	fmt.Fprintf(&b, ", %d output tokens", s.NumOutputTokens)
	if s.LoRAAdapter != "" {
		fmt.Fprintf(&b, "; adapter %s", s.LoRAAdapter)
	}
	views := append([]otelstats.RequestStats{*s}, c.parts...)
	for i := range views {
		v := &views[i]
		if v.NumPreemptions > 0 {
			fmt.Fprintf(&b, "; %s%d preemption(s), %s preempted", rolePrefix(v), v.NumPreemptions, waterfall.Dur(v.PreemptedDuration.Round(time.Microsecond)))
		}
		if v.NumSpecSteps > 0 {
			fmt.Fprintf(&b, "; %sspeculative: %d of %d draft tokens accepted (%.0f%%), mean acceptance length %.2f",
				rolePrefix(v), v.NumAcceptedTokens, v.NumDraftTokens, 100*v.SpecAcceptanceRate, v.SpecMeanAcceptanceLength)
		}
		if v.NumEncoderRuns > 0 {
			fmt.Fprintf(&b, "; %s%d encoder run(s), %s", rolePrefix(v), v.NumEncoderRuns, lat(v.EncodeDuration))
		}
	}
	if s.PDPrefillDuration.Valid {
		fmt.Fprintf(&b, "\n  P/D: router → P → router %s, router → D → first token %s", lat(s.PDPrefillDuration), lat(s.PDDecodeTTFT))
		for i := range c.parts {
			v := &c.parts[i]
			if v.KVSource == "" {
				continue
			}
			state := "ok"
			if v.KVTransferFailed {
				state = "FAILED, prompt recomputed"
			}
			fmt.Fprintf(&b, "; KV transfer %s from %s, %d tokens, %.1f MB (%s); D's TTFT %s, queue %s",
				lat(v.KVTransferDuration), v.KVSource, v.NumRemoteTokens, float64(v.KVTransferBytes)/1e6, state, lat(v.FirstTokenLatency), lat(v.QueueDuration))
		}
	}
	return b.String()
}

func rolePrefix(v *otelstats.RequestStats) string {
	if v.PDRole == "" {
		return ""
	}
	return v.PDRole + ": "
}
