package otelstats

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SamplingPolicy decides, when a request finishes, whether its trace is
// kept. The tracker has seen the whole request by then, so unlike head
// sampling it can keep exactly the slow, preempted and failed requests an
// operator needs, and unlike collector tail sampling nothing is shipped or
// buffered first. Metrics count every request either way.
//
// Rules are checked in order; the first that matches keeps the trace and
// names the reason (the root's llm.sampling.reason):
//
//	parent     a trusted parent (WithTrustParentSampling) was sampled; a
//	           trusted unsampled parent drops the trace
//	error      finish reason error, abort, abandoned, evicted or unfinished
//	preempted  the request was preempted at least once
//	slow_ttft, slow_tpot, slow_e2e
//	           above the absolute threshold, or above the running percentile
//	           of recent requests
//	ratio      the trace id falls in the kept Ratio of the rest (decided by
//	           trace id, so every process agrees)
//
// Without a policy (no WithSampling) the tracker keeps
// every trace (reason "all"), so nobody loses traces by upgrading. The zero
// SamplingPolicy keeps nothing but trusted parents' choices.
type SamplingPolicy struct {
	KeepErrors    bool
	KeepPreempted bool
	// Absolute thresholds; zero disables.
	TTFTAbove, TPOTAbove, E2EAbove time.Duration
	// Percentile, when in (0, 100), keeps requests whose TTFT, TPOT or e2e
	// exceeds that percentile of the last 1,000 requests.
	Percentile float64
	// Ratio of the remaining traces kept, 0 to 1.
	Ratio float64
}

// Reasons a trace was kept or dropped (llm.sampling.reason).
const (
	SampledAll       = "all"
	SampledParent    = "parent"
	SampledError     = "error"
	SampledPreempted = "preempted"
	SampledSlowTTFT  = "slow_ttft"
	SampledSlowTPOT  = "slow_tpot"
	SampledSlowE2E   = "slow_e2e"
	SampledRatio     = "ratio"
	// SampledHead is the reason of a trace the head sampler
	// (WithHeadSampler) kept, with no end-of-request policy.
	SampledHead = "head"
	// NotSampled is the reason of a dropped trace (seen in RequestStats):
	// dropped by the policy or, on the Tracer path, not sampled by the
	// TracerProvider (its sampler, a no-op provider, one shut down).
	NotSampled = "dropped"
	// NotTraced is the reason of every request of a tracker that builds
	// no traces (WithTraces(false)).
	NotTraced = "traces_off"
)

// ParseSamplingPolicy reads a policy's text form (otelconf's LLMTRACE_SAMPLING): comma-separated
// rules among "errors", "preempted", "ttft>DUR", "tpot>DUR", "e2e>DUR",
// "pNN" (e.g. "p99") and "ratio=F". "all" (or "") keeps everything and
// returns nil.
//
//	LLMTRACE_SAMPLING=errors,preempted,ttft>2s,tpot>150ms,p99,ratio=0.05
func ParseSamplingPolicy(s string) (*SamplingPolicy, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return nil, nil
	}
	p := &SamplingPolicy{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		var err error
		switch {
		case f == "errors":
			p.KeepErrors = true
		case f == "preempted":
			p.KeepPreempted = true
		case strings.HasPrefix(f, "ttft>"):
			p.TTFTAbove, err = time.ParseDuration(f[5:])
		case strings.HasPrefix(f, "tpot>"):
			p.TPOTAbove, err = time.ParseDuration(f[5:])
		case strings.HasPrefix(f, "e2e>"):
			p.E2EAbove, err = time.ParseDuration(f[4:])
		case strings.HasPrefix(f, "ratio="):
			p.Ratio, err = strconv.ParseFloat(f[6:], 64)
			if err == nil && (p.Ratio < 0 || p.Ratio > 1) {
				err = fmt.Errorf("ratio %v outside [0, 1]", p.Ratio)
			}
		case len(f) > 1 && f[0] == 'p':
			p.Percentile, err = strconv.ParseFloat(f[1:], 64)
			if err == nil && (p.Percentile <= 0 || p.Percentile >= 100) {
				err = fmt.Errorf("percentile %v outside (0, 100)", p.Percentile)
			}
		default:
			err = fmt.Errorf("unknown rule %q", f)
		}
		if err != nil {
			return nil, fmt.Errorf("llmtrace: sampling policy %q: %w", s, err)
		}
	}
	return p, nil
}

// sampler evaluates a policy with running percentiles.
type sampler struct {
	p  SamplingPolicy
	mu sync.Mutex
	// Rings of recent values (ns) and the thresholds computed from them.
	rings     [3]ring
	threshold [3]int64
	sinceCalc int
}

const ringSize = 1000

type ring struct {
	v    [ringSize]int64
	n    int
	next int
}

func (r *ring) add(v int64) {
	r.v[r.next] = v
	r.next = (r.next + 1) % ringSize
	r.n = min(r.n+1, ringSize)
}

func newSampler(p *SamplingPolicy) *sampler {
	if p == nil {
		return nil
	}
	return &sampler{p: *p}
}

// decide returns whether to keep the trace and why.
func (s *sampler) decide(st *RequestStats, traceID [16]byte, parentSampled, parentTrusted bool) (bool, string) {
	if parentTrusted {
		if parentSampled {
			return true, SampledParent
		}
		return false, NotSampled
	}
	if s == nil {
		return true, SampledAll
	}
	if s.p.KeepErrors && isFailure(st.FinishReason) {
		return true, SampledError
	}
	if s.p.KeepPreempted && st.NumPreemptions > 0 {
		return true, SampledPreempted
	}
	if why := s.slow(st); why != "" {
		return true, why
	}
	if s.p.Ratio > 0 && ratioKeep(traceID, s.p.Ratio) {
		return true, SampledRatio
	}
	return false, NotSampled
}

// slow names the first latency above its absolute threshold or its running
// percentile, or returns "". It feeds the percentiles' rings.
func (s *sampler) slow(st *RequestStats) string {
	vals := [3]Latency{st.FirstTokenLatency, st.TimePerOutputToken, st.E2ELatency}
	abs := [3]time.Duration{s.p.TTFTAbove, s.p.TPOTAbove, s.p.E2EAbove}
	names := [3]string{SampledSlowTTFT, SampledSlowTPOT, SampledSlowE2E}
	var pct [3]int64
	if s.p.Percentile > 0 {
		pct = s.observe(vals)
	}
	for i, v := range vals {
		if v.Valid && (abs[i] > 0 && v.Value > abs[i] || pct[i] > 0 && int64(v.Value) > pct[i]) {
			return names[i]
		}
	}
	return ""
}

// observe adds vals to the rings and returns the thresholds as they were
// before, recomputed every 100 requests.
func (s *sampler) observe(vals [3]Latency) [3]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	pct := s.threshold
	for i, v := range vals {
		if v.Valid {
			s.rings[i].add(int64(v.Value))
		}
	}
	s.sinceCalc++
	if s.sinceCalc >= 100 {
		s.sinceCalc = 0
		for i := range s.rings {
			s.threshold[i] = percentileOf(&s.rings[i], s.p.Percentile)
		}
	}
	return pct
}

// ratioKeep decides by the trace id's low 63 bits, like TraceIDRatioBased.
func ratioKeep(id [16]byte, ratio float64) bool {
	if ratio >= 1 {
		return true
	}
	x := binary.BigEndian.Uint64(id[8:16]) >> 1
	return float64(x) < ratio*(1<<63)
}

func percentileOf(r *ring, p float64) int64 {
	if r.n < 100 {
		return 0 // too few requests for a percentile to mean anything
	}
	v := slices.Clone(r.v[:r.n])
	slices.Sort(v)
	i := int(p / 100 * float64(len(v)))
	return v[min(i, len(v)-1)]
}
