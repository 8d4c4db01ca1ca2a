// Package summary computes the percentile table that replay and the demo
// print from RequestStats.
package summary

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/llmtrace/llmtrace/otelstats"
)

// Collector accumulates finished requests. The zero value is ready to use;
// it is not safe for concurrent use.
type Collector struct {
	TTFT, TPOT, ITL, Queue, Prefill, Decode, E2E []float64

	Requests     int
	Reasons      map[string]int
	Preemptions  int
	Preempted    int // requests preempted at least once
	PromptTokens int64
	OutputTokens int64
	CacheQueries int64
	CacheHits    int64
	First, Last  time.Time
}

// Add records one request.
func (c *Collector) Add(s *otelstats.RequestStats) {
	c.Requests++
	if c.Reasons == nil {
		c.Reasons = map[string]int{}
	}
	c.Reasons[s.FinishReason]++
	add := func(dst *[]float64, l otelstats.Latency) {
		if l.Valid {
			*dst = append(*dst, l.Value.Seconds())
		}
	}
	add(&c.TTFT, s.FirstTokenLatency)
	add(&c.TPOT, s.TimePerOutputToken)
	add(&c.Queue, s.QueueDuration)
	add(&c.Prefill, s.PrefillLatency)
	add(&c.Decode, s.DecodeLatency)
	add(&c.E2E, s.E2ELatency)
	for _, d := range s.OutputTokenLatencies {
		c.ITL = append(c.ITL, d.Seconds())
	}
	c.Preemptions += s.NumPreemptions
	if s.NumPreemptions > 0 {
		c.Preempted++
	}
	if s.NumPromptTokens.Valid {
		c.PromptTokens += int64(s.NumPromptTokens.N)
		if s.NumCachedTokens.Valid {
			c.CacheQueries += int64(s.NumPromptTokens.N)
			c.CacheHits += int64(s.NumCachedTokens.N)
		}
	}
	c.OutputTokens += int64(s.NumOutputTokens)
	if c.First.IsZero() || s.ArrivalTime.Before(c.First) {
		c.First = s.ArrivalTime
	}
	if s.FinishedTime.After(c.Last) {
		c.Last = s.FinishedTime
	}
}

// Percentile returns the p-th percentile (0–100) of xs by the nearest-rank
// method, sorting xs in place; ok is false when xs is empty.
func Percentile(xs []float64, p float64) (v float64, ok bool) {
	if len(xs) == 0 {
		return 0, false
	}
	if !sort.Float64sAreSorted(xs) {
		sort.Float64s(xs)
	}
	rank := int(p/100*float64(len(xs)) + 0.999999999)
	rank = min(max(rank, 1), len(xs))
	return xs[rank-1], true
}

// WriteTable writes the percentile table and totals.
func (c *Collector) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-14s %8s %10s %10s %10s %10s\n", "metric", "count", "p50", "p90", "p99", "max")
	row := func(name string, xs []float64) {
		if len(xs) == 0 {
			fmt.Fprintf(w, "%-14s %8d %10s %10s %10s %10s\n", name, 0, "-", "-", "-", "-")
			return
		}
		p50, _ := Percentile(xs, 50)
		p90, _ := Percentile(xs, 90)
		p99, _ := Percentile(xs, 99)
		fmt.Fprintf(w, "%-14s %8d %10s %10s %10s %10s\n", name, len(xs), ms(p50), ms(p90), ms(p99), ms(xs[len(xs)-1]))
	}
	row("TTFT", c.TTFT)
	row("TPOT", c.TPOT)
	row("ITL", c.ITL)
	row("queue", c.Queue)
	row("prefill", c.Prefill)
	row("decode", c.Decode)
	row("e2e", c.E2E)
	reasons := make([]string, 0, len(c.Reasons))
	for r, n := range c.Reasons {
		reasons = append(reasons, fmt.Sprintf("%s=%d", printable(r), n))
	}
	sort.Strings(reasons)
	fmt.Fprintf(w, "requests: %d (%s)\n", c.Requests, strings.Join(reasons, ", "))
	fmt.Fprintf(w, "preemptions: %d in %d request(s)\n", c.Preemptions, c.Preempted)
	if c.CacheQueries > 0 {
		fmt.Fprintf(w, "prefix-cache hit rate: %.1f%% (%d of %d prompt tokens)\n",
			100*float64(c.CacheHits)/float64(c.CacheQueries), c.CacheHits, c.CacheQueries)
	}
	if span := c.Last.Sub(c.First).Seconds(); span > 0 {
		fmt.Fprintf(w, "throughput: %.1f req/s, %.0f prompt tok/s, %.0f output tok/s over %.1fs\n",
			float64(c.Requests)/span, float64(c.PromptTokens)/span, float64(c.OutputTokens)/span, span)
	}
}

// printable is s as it is when every rune of it prints, else quoted with
// Go's escapes: a finish reason comes from the log or a producer, and one
// holding ESC or BEL would drive the operator's terminal (set its title,
// hide lines) when the table is printed.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

func ms(s float64) string {
	switch {
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1000)
	default:
		return fmt.Sprintf("%.3fs", s)
	}
}
