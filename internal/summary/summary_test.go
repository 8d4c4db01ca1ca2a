package summary

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

func TestPercentile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		p    float64
		want float64
		ok   bool
	}{
		{nil, 50, 0, false},
		{[]float64{3}, 99, 3, true},
		{[]float64{5, 1, 4, 2, 3}, 50, 3, true}, // nearest rank: ceil(2.5) = 3rd
		{[]float64{5, 1, 4, 2, 3}, 90, 5, true},
		{[]float64{5, 1, 4, 2, 3}, 0, 1, true},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9, true},
	} {
		got, ok := Percentile(append([]float64(nil), tc.xs...), tc.p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Percentile(%v, %v) = %v, %v; want %v, %v", tc.xs, tc.p, got, ok, tc.want, tc.ok)
		}
	}
}

func lat(d time.Duration) otelstats.Latency { return otelstats.Latency{Value: d, Valid: true} }

// TestTable: absent values (an abort before its first token) leave no
// sample, and the totals add up.
func TestTable(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var c Collector
	c.Add(&otelstats.RequestStats{FinishReason: "stop", ArrivalTime: t0, FinishedTime: t0.Add(2 * time.Second),
		FirstTokenLatency: lat(100 * time.Millisecond), E2ELatency: lat(2 * time.Second), NumOutputTokens: 10,
		NumPromptTokens: otelstats.Count{N: 100, Valid: true}, NumCachedTokens: otelstats.Count{N: 25, Valid: true},
		OutputTokenLatencies: []time.Duration{20 * time.Millisecond, 30 * time.Millisecond}, NumPreemptions: 2})
	c.Add(&otelstats.RequestStats{FinishReason: "abort", ArrivalTime: t0.Add(time.Second), FinishedTime: t0.Add(1500 * time.Millisecond),
		E2ELatency: lat(500 * time.Millisecond)})
	var b bytes.Buffer
	c.WriteTable(&b)
	out := b.String()
	for _, want := range []string{
		"TTFT                  1    100.0ms",
		"ITL                   2     20.0ms     30.0ms",
		"e2e                   2    500.0ms     2.000s",
		"TPOT                  0          -",
		"requests: 2 (abort=1, stop=1)",
		"preemptions: 2 in 1 request(s)",
		"prefix-cache hit rate: 25.0% (25 of 100 prompt tokens)",
		"throughput: 1.0 req/s, 50 prompt tok/s, 5 output tok/s over 2.0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestTableEscapesControls: a finish reason is the producer's text; one
// holding terminal escapes (ESC, BEL, a newline) is printed escaped, so a
// hostile log cannot drive the terminal replay's table is printed on, nor
// add lines to it.
func TestTableEscapesControls(t *testing.T) {
	var c Collector
	for _, r := range []string{"stop", "st\x1b]0;owned\aop", "a\nrequests: 99 (fake=1)", "länge"} {
		c.Add(&otelstats.RequestStats{FinishReason: r})
	}
	var b bytes.Buffer
	c.WriteTable(&b)
	out := b.String()
	if strings.ContainsAny(out, "\x1b\a") || strings.Contains(out, "\nrequests: 99") {
		t.Errorf("a control character reached the table:\n%q", out)
	}
	for _, want := range []string{`"st\x1b]0;owned\aop"=1`, `"a\nrequests: 99 (fake=1)"=1`, "länge=1", "stop=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
}
