package overhead

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Summary is one configuration over its rounds: each figure the median of
// the rounds'.
type Summary struct {
	Result
	Rounds int `json:"rounds"`
}

// Summarize takes the median of each configuration's rounds, in the order
// of Configs.
func Summarize(results []*Result) []Summary {
	var out []Summary
	for _, c := range Configs() {
		var rs []*Result
		for _, r := range results {
			if r.Config == c.Name() {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		m := func(f func(*Result) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = f(r)
			}
			return median(xs)
		}
		s := Summary{Rounds: len(rs), Result: Result{Config: c.Name(), Family: c.Family, Rate: c.Rate, Load: rs[len(rs)-1].Load}}
		s.Requests = int(m(func(r *Result) float64 { return float64(r.Requests) }))
		s.Served = int(m(func(r *Result) float64 { return float64(r.Served) }))
		s.ReqPerSec, s.TokPerSec = m(func(r *Result) float64 { return r.ReqPerSec }), m(func(r *Result) float64 { return r.TokPerSec })
		s.TTFTp50, s.TTFTp99 = m(func(r *Result) float64 { return r.TTFTp50 }), m(func(r *Result) float64 { return r.TTFTp99 })
		s.ITLp50, s.ITLp99 = m(func(r *Result) float64 { return r.ITLp50 }), m(func(r *Result) float64 { return r.ITLp99 })
		for _, p := range []struct {
			dst *ProcessCost
			get func(*Result) *ProcessCost
		}{{&s.Proxy, func(r *Result) *ProcessCost { return &r.Proxy }}, {&s.Server, func(r *Result) *ProcessCost { return &r.Server }}} {
			p.dst.CPU = m(func(r *Result) float64 { return p.get(r).CPU })
			p.dst.Allocs = m(func(r *Result) float64 { return p.get(r).Allocs })
			p.dst.Bytes = m(func(r *Result) float64 { return p.get(r).Bytes })
			p.dst.MaxRSS = m(func(r *Result) float64 { return p.get(r).MaxRSS })
		}
		s.ClientCPU = m(func(r *Result) float64 { return r.ClientCPU })
		s.Traces = int(m(func(r *Result) float64 { return float64(r.Traces) }))
		s.Spans = int(m(func(r *Result) float64 { return float64(r.Spans) }))
		s.MetricExports = int(m(func(r *Result) float64 { return float64(r.MetricExports) }))
		out = append(out, s)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Markdown is the summaries as BENCHMARKS.md's table: throughput relative
// to the baseline, latencies, and each process's costs per request.
func Markdown(ss []Summary) string {
	var b strings.Builder
	base := 0.0
	for _, s := range ss {
		if s.Family == Baseline {
			base = s.TokPerSec
		}
	}
	b.WriteString("| configuration | req/s | tok/s | vs baseline | TTFT p50 / p99 ms | ITL p50 / p99 ms | CPU µs/req proxy + server | allocs/req proxy, server | KB/req proxy, server | peak RSS MiB proxy, server | traces kept |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range ss {
		rel := "—"
		if base > 0 {
			rel = fmt.Sprintf("%+.1f%%", (s.TokPerSec/base-1)*100)
		}
		traces := fmt.Sprintf("%.1f%%", 100*float64(s.Traces)/float64(max(s.Served, 1)))
		if !(Config{Family: s.Family}).Traced() {
			traces = "—"
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %s | %.1f / %.1f | %.2f / %.2f | %.0f + %.0f = %.0f | %.0f, %.0f | %.1f, %.1f | %.0f, %.0f | %s |\n",
			s.Config, s.ReqPerSec, s.TokPerSec, rel, s.TTFTp50, s.TTFTp99, s.ITLp50, s.ITLp99,
			s.Proxy.CPU, s.Server.CPU, s.Proxy.CPU+s.Server.CPU, s.Proxy.Allocs, s.Server.Allocs,
			s.Proxy.Bytes/1024, s.Server.Bytes/1024, s.Proxy.MaxRSS, s.Server.MaxRSS, traces)
	}
	return b.String()
}

// loadAverage is the machine's load average (1, 5, 15 minutes), or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
