package otelstats

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/internal/textcap"
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
//
// Rules are lower case; spaces around a rule are ignored. A text that does
// not say exactly one policy is a *SamplingPolicyError: an empty or unknown
// rule, a rule given twice, a threshold that is not a positive duration
// (at least 1ns), a ratio outside [0, 1] or a percentile outside (0, 100),
// NaN included.
func ParseSamplingPolicy(s string) (*SamplingPolicy, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return nil, nil
	}
	p := &SamplingPolicy{}
	var seen [7]bool
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		rule, reason, err := parseRule(p, f)
		if err == nil && reason == "" {
			if seen[rule] {
				reason = "given twice"
			}
			seen[rule] = true
		}
		if reason != "" || err != nil {
			return nil, &SamplingPolicyError{Rule: capRule(f), Reason: reason, Err: err}
		}
	}
	return p, nil
}

// parseRule sets the field of p that rule f names and returns which rule it
// is (an index into a table of those seen), or why f is not a rule.
func parseRule(p *SamplingPolicy, f string) (rule int, reason string, err error) {
	dur := func(v string, d *time.Duration) (string, error) {
		if *d, err = time.ParseDuration(v); err != nil {
			return "not a duration", err
		}
		if *d <= 0 {
			return "the threshold must be a positive duration", nil
		}
		return "", nil
	}
	switch {
	case f == "":
		return 0, "empty rule", nil
	case f == "errors":
		p.KeepErrors = true
		return 0, "", nil
	case f == "preempted":
		p.KeepPreempted = true
		return 1, "", nil
	case strings.HasPrefix(f, "ttft>"):
		reason, err = dur(f[5:], &p.TTFTAbove)
		return 2, reason, err
	case strings.HasPrefix(f, "tpot>"):
		reason, err = dur(f[5:], &p.TPOTAbove)
		return 3, reason, err
	case strings.HasPrefix(f, "e2e>"):
		reason, err = dur(f[4:], &p.E2EAbove)
		return 4, reason, err
	case strings.HasPrefix(f, "ratio="):
		if p.Ratio, err = strconv.ParseFloat(f[6:], 64); err != nil {
			return 5, "not a number", err
		}
		if !(p.Ratio >= 0 && p.Ratio <= 1) { // NaN too
			return 5, "the ratio must be within [0, 1]", nil
		}
		if p.Ratio == 0 {
			p.Ratio = 0 // -0 reads as 0
		}
		return 5, "", nil
	case len(f) > 1 && f[0] == 'p' && (f[1] == '.' || f[1] >= '0' && f[1] <= '9'):
		if p.Percentile, err = strconv.ParseFloat(f[1:], 64); err != nil {
			return 6, "not a number", err
		}
		if !(p.Percentile > 0 && p.Percentile < 100) { // NaN too
			return 6, "the percentile must be within (0, 100)", nil
		}
		return 6, "", nil
	}
	return 0, "unknown rule (want errors, preempted, ttft>DUR, tpot>DUR, e2e>DUR, pNN or ratio=F)", nil
}

// SamplingPolicyError is ParseSamplingPolicy's error: which rule of the
// policy's text is wrong and why.
type SamplingPolicyError struct {
	Rule   string // the rule as given (cut at 64 bytes); "" for an empty one
	Reason string // why it is not a rule
	Err    error  // the number's or duration's parse error, if any
}

func (e *SamplingPolicyError) Error() string {
	msg := fmt.Sprintf("llmtrace: sampling policy rule %q: %s", e.Rule, e.Reason)
	if e.Err != nil {
		msg += ": " + capRule(e.Err.Error())
	}
	return msg
}

func (e *SamplingPolicyError) Unwrap() error { return e.Err }

// capRule cuts a rule quoted in an error to 64 bytes, on a UTF-8 boundary.
func capRule(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return textcap.Cut(s, limit) + "…"
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

// decide returns whether to keep the trace and why. Every request feeds
// the running percentiles, whichever rule (or trusted parent) decides it:
// they are those of the last requests, not of the ones no rule kept.
func (s *sampler) decide(st *RequestStats, traceID [16]byte, parentSampled, parentTrusted bool) (bool, string) {
	if s == nil {
		if parentTrusted && !parentSampled {
			return false, NotSampled
		}
		if parentTrusted {
			return true, SampledParent
		}
		return true, SampledAll
	}
	vals := [3]Latency{st.FirstTokenLatency, st.TimePerOutputToken, st.E2ELatency}
	var pct [3]int64
	if s.p.Percentile > 0 && s.p.Percentile < 100 {
		pct = s.observe(vals)
	}
	if parentTrusted {
		if parentSampled {
			return true, SampledParent
		}
		return false, NotSampled
	}
	if s.p.KeepErrors && isFailure(st.FinishReason) {
		return true, SampledError
	}
	if s.p.KeepPreempted && st.NumPreemptions > 0 {
		return true, SampledPreempted
	}
	if why := s.slow(&vals, &pct); why != "" {
		return true, why
	}
	if s.p.Ratio > 0 && ratioKeep(traceID, s.p.Ratio) {
		return true, SampledRatio
	}
	return false, NotSampled
}

// slow names the first latency above its absolute threshold or its running
// percentile threshold (pct, 0 where none), or returns "".
func (s *sampler) slow(vals *[3]Latency, pct *[3]int64) string {
	abs := [3]time.Duration{s.p.TTFTAbove, s.p.TPOTAbove, s.p.E2EAbove}
	names := [3]string{SampledSlowTTFT, SampledSlowTPOT, SampledSlowE2E}
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

// ratioKeep decides by the trace id's low 63 bits exactly as the SDK's
// TraceIDRatioBased does (the same integer bound), so a head sampler and
// this policy keep the same trace ids.
func ratioKeep(id [16]byte, ratio float64) bool {
	if ratio >= 1 {
		return true
	}
	x := binary.BigEndian.Uint64(id[8:16]) >> 1
	return x < uint64(ratio*(1<<63))
}

// percentileOf is the nearest-rank p-th percentile of r: the smallest value
// with at least p% of the window at or below it, so that (100-p)% lie
// above it.
func percentileOf(r *ring, p float64) int64 {
	if r.n < 100 {
		return 0 // too few requests for a percentile to mean anything
	}
	v := slices.Clone(r.v[:r.n])
	slices.Sort(v)
	// The tolerance keeps float error (99.9/100*1000 = 999.0000000000001)
	// from moving the rank up by one.
	i := int(math.Ceil(p/100*float64(len(v))-1e-9)) - 1
	return v[max(0, min(i, len(v)-1))]
}
