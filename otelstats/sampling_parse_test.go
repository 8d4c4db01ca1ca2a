package otelstats

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestParseSamplingPolicyHostile: a policy string that does not say one
// policy exactly is a *SamplingPolicyError naming the rule, never a panic
// and never a policy that silently differs from the text (a rule dropped,
// overridden or turned off).
func TestParseSamplingPolicyHostile(t *testing.T) {
	bad := []string{
		",", "errors,", "errors,,preempted", " , ",
		"ttft>1s,ttft>2s", "p99,p50", "errors,errors", "ratio=0.1,ratio=0.2", "e2e>1s, e2e>1s",
		"ratio=1.5", "ratio=NaN", "ratio=nan", "ratio=inf", "ratio=-0.1",
		"pNaN", "p+Inf", "p0", "p100", "p-0", "p",
		"ttft>-1s", "tpot>0", "e2e>0s", "ttft>0.0000000001s", "ttft>", "ttft>1e400s", "e2e>9999999999h",
		"foo", "ERRORS", "P99", "ttft > 1s", "ratio = 0.1", "all,errors", "parent",
	}
	for _, s := range bad {
		p, err := ParseSamplingPolicy(s)
		var pe *SamplingPolicyError
		if !errors.As(err, &pe) {
			t.Errorf("%q: policy %+v, error %v; want a *SamplingPolicyError", s, p, err)
			continue
		}
		if p != nil {
			t.Errorf("%q: a policy beside the error", s)
		}
		if pe.Rule == "" && strings.Trim(s, " ,") != "" && !strings.Contains(s, ",,") && !strings.HasSuffix(s, ",") {
			t.Errorf("%q: error %v names no rule", s, err)
		}
	}

	good := map[string]SamplingPolicy{
		" errors , preempted ,p99, ratio=0.05 ": {KeepErrors: true, KeepPreempted: true, Percentile: 99, Ratio: 0.05},
		"ttft>1s,tpot>150ms,e2e>1m":             {TTFTAbove: time.Second, TPOTAbove: 150 * time.Millisecond, E2EAbove: time.Minute},
		"ratio=0":                               {},
		"ratio=1":                               {Ratio: 1},
		"p99.9":                                 {Percentile: 99.9},
	}
	for s, want := range good {
		p, err := ParseSamplingPolicy(s)
		if err != nil || p == nil || *p != want {
			t.Errorf("%q: %+v, %v; want %+v", s, p, err, want)
		}
	}
	// -0 reads as 0, not a negative ratio.
	if p, err := ParseSamplingPolicy("ratio=-0"); err != nil || p.Ratio != 0 || math.Signbit(p.Ratio) {
		t.Errorf("ratio=-0: %+v, %v", p, err)
	}

	// A megabyte of policy: an error of bounded size, not the input echoed.
	huge := strings.Repeat("errors,", 150_000) + strings.Repeat("x", 100_000)
	if _, err := ParseSamplingPolicy(huge); err == nil || len(err.Error()) > 512 {
		n := 0
		if err != nil {
			n = len(err.Error())
		}
		t.Errorf("1 MB policy: error of %d bytes (%v)", n, err == nil)
	}
}

// FuzzParseSamplingPolicy: never a panic; a policy that parses has its
// fields in range.
func FuzzParseSamplingPolicy(f *testing.F) {
	for _, s := range []string{"errors,preempted,ttft>2s,tpot>150ms,p99,ratio=0.05", "ratio=NaN", "p1e1", "e2e>-1s", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseSamplingPolicy(s)
		if err != nil || p == nil {
			return
		}
		if !(p.Ratio >= 0 && p.Ratio <= 1) || p.Percentile != 0 && !(p.Percentile > 0 && p.Percentile < 100) ||
			p.TTFTAbove < 0 || p.TPOTAbove < 0 || p.E2EAbove < 0 {
			t.Fatalf("%q parsed to %+v", s, p)
		}
	})
}

// TestSamplingPercentileOverEveryRequest: the running percentile is that of
// the last requests, all of them (README: "the running p99 of the last
// 1,000 requests"), not only of those no earlier rule kept. Here the slow
// half of the traffic is preempted; p90 of all requests lies among them, so
// no fast, unpreempted request is slow.
func TestSamplingPercentileOverEveryRequest(t *testing.T) {
	s := newSampler(&SamplingPolicy{KeepPreempted: true, KeepErrors: true, Percentile: 90})
	var id [16]byte
	for i := range 400 {
		st := RequestStats{FinishReason: "stop"}
		if i%2 == 0 {
			st.NumPreemptions = 1
			st.FirstTokenLatency = some(time.Duration(1000+i) * time.Millisecond)
		} else {
			st.FirstTokenLatency = some(time.Duration(10+i%100) * time.Millisecond)
		}
		keep, why := s.decide(&st, id, false, false)
		if i%2 == 1 && keep {
			t.Fatalf("request %d (TTFT %v, unpreempted) kept as %q: p90 of every request is above a second",
				i, st.FirstTokenLatency.Value, why)
		}
	}
}

// TestPercentileNearestRank: p99 of 1…1000 is 990 (nearest rank), so 1%
// of a window lies above it, not 0.9%.
func TestPercentileNearestRank(t *testing.T) {
	var r ring
	for i := range 1000 {
		r.add(int64(1000 - i))
	}
	for _, c := range []struct {
		p    float64
		want int64
	}{{99, 990}, {90, 900}, {50, 500}, {99.9, 999}, {0.1, 1}} {
		if got := percentileOf(&r, c.p); got != c.want {
			t.Errorf("p%v of 1…1000 = %d, want %d", c.p, got, c.want)
		}
	}
}

// TestSamplingPercentileOutOfRangeOff: a Percentile outside (0, 100) keeps
// nothing as slow, as SamplingPolicy documents, rather than acting as the
// window's maximum.
func TestSamplingPercentileOutOfRangeOff(t *testing.T) {
	for _, pct := range []float64{100, 150, math.Inf(1), math.NaN(), -5} {
		s := newSampler(&SamplingPolicy{Percentile: pct})
		var id [16]byte
		for i := range 300 {
			st := RequestStats{FinishReason: "stop", FirstTokenLatency: some(time.Duration(1+i) * time.Millisecond)}
			if keep, why := s.decide(&st, id, false, false); keep {
				t.Fatalf("Percentile %v: request %d kept as %q", pct, i, why)
			}
		}
	}
}

// TestSamplingRatioAgreesWithTraceIDRatioBased: the policy's ratio keeps
// exactly the trace ids the SDK's TraceIDRatioBased sampler (a head
// sampler, OTEL_TRACES_SAMPLER=traceidratio) keeps, at its boundary too.
func TestSamplingRatioAgreesWithTraceIDRatioBased(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, ratio := range []float64{0.5, 0.1, 0.05, 0.25, 1e-9, 0.999999, 0.3} {
		sdk := sdktrace.TraceIDRatioBased(ratio)
		bound := uint64(ratio * (1 << 63))
		var xs []uint64
		for d := uint64(0); d < 2048; d++ {
			xs = append(xs, bound-d, bound+d)
		}
		for range 2000 {
			xs = append(xs, rng.Uint64()>>1)
		}
		for _, x := range xs {
			var id [16]byte
			binary.BigEndian.PutUint64(id[:8], rng.Uint64())
			binary.BigEndian.PutUint64(id[8:], x<<1|uint64(rng.IntN(2)))
			want := sdk.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: id}).Decision == sdktrace.RecordAndSample
			if got := ratioKeep(id, ratio); got != want {
				t.Fatalf("ratio %v, trace id %x: policy keeps=%v, TraceIDRatioBased keeps=%v", ratio, id, got, want)
			}
		}
	}
}
