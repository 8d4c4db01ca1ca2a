package deploycheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmtrace/llmtrace/attributes"
)

const vllmRules = "deploy/prometheus/vllm.rules.yml"

// vllmMetric is one of vLLM's Prometheus metrics that deploy's recording
// rules give from llmtrace's. Names, types and histogram boundaries are
// vLLM V1's PrometheusStatLogger (vllm/v1/metrics/loggers.py); every series
// carries model_name and engine.
type vllmMetric struct {
	name string // without the _total, _bucket, _sum or _count suffix
	kind string // histogram, counter, gauge
	from string // the llmtrace instrument, from package attributes
	// vllmBuckets are vLLM's boundaries; subset says llmtrace's must hold
	// all of them (an alert on one of vLLM's le values then works).
	vllmBuckets []float64
	subset      bool
}

// vLLM's histogram boundaries (loggers.py).
var (
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	vllmReqBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

func vllmMetrics() []vllmMetric {
	return []vllmMetric{
		{"vllm:num_requests_running", "gauge", attributes.MetricRequestsRunning, nil, false},
		{"vllm:spec_decode_num_drafts", "counter", attributes.MetricSpecSteps, nil, false},
		{"vllm:spec_decode_num_draft_tokens", "counter", attributes.MetricSpecDraftTokens, nil, false},
		{"vllm:spec_decode_num_accepted_tokens", "counter", attributes.MetricSpecAcceptedTokens, nil, false},
		{"vllm:spec_decode_num_accepted_tokens_per_pos", "counter", attributes.MetricSpecAcceptedPerPosition, nil, false},
		{"vllm:num_requests_waiting", "gauge", attributes.MetricRequestsWaiting, nil, false},
		{"vllm:kv_cache_usage_perc", "gauge", attributes.MetricKVCacheUsage, nil, false},
		{"vllm:gpu_cache_usage_perc", "gauge", attributes.MetricKVCacheUsage, nil, false}, // before 0.10
		{"vllm:prompt_tokens", "counter", attributes.MetricPromptTokens, nil, false},
		{"vllm:generation_tokens", "counter", attributes.MetricGenerationTokens, nil, false},
		{"vllm:num_preemptions", "counter", attributes.MetricPreemptions, nil, false},
		{"vllm:request_success", "counter", attributes.MetricRequests, nil, false},
		{"vllm:prefix_cache_queries", "counter", attributes.MetricPrefixCacheQuery, nil, false},
		{"vllm:prefix_cache_hits", "counter", attributes.MetricPrefixCacheHits, nil, false},
		{"vllm:gpu_prefix_cache_queries", "counter", attributes.MetricPrefixCacheQuery, nil, false}, // before 0.10
		{"vllm:gpu_prefix_cache_hits", "counter", attributes.MetricPrefixCacheHits, nil, false},     // before 0.10
		{"vllm:time_to_first_token_seconds", "histogram", attributes.MetricTimeToFirstToken, vllmTTFTBuckets, false},
		{"vllm:inter_token_latency_seconds", "histogram", attributes.MetricInterTokenLatency, vllmITLBuckets, true},
		// Before 0.11 vLLM observed every inter-token gap under this name.
		{"vllm:time_per_output_token_seconds", "histogram", attributes.MetricInterTokenLatency, vllmITLBuckets, true},
		{"vllm:request_time_per_output_token_seconds", "histogram", attributes.MetricTimePerOutputToken, vllmITLBuckets, false},
		{"vllm:e2e_request_latency_seconds", "histogram", attributes.MetricRequestDuration, vllmReqBuckets, false},
		{"vllm:request_queue_time_seconds", "histogram", attributes.MetricQueueDuration, vllmReqBuckets, true},
		{"vllm:request_prefill_time_seconds", "histogram", attributes.MetricPrefillDuration, vllmReqBuckets, true},
		{"vllm:request_decode_time_seconds", "histogram", attributes.MetricDecodeDuration, vllmReqBuckets, true},
		{"vllm:request_inference_time_seconds", "histogram", attributes.MetricInferenceDuration, vllmReqBuckets, true},
	}
}

// vllmUnsupported are vLLM metrics no rule gives, and why; README's
// Compatibility section lists the same.
var vllmUnsupported = map[string]string{
	"vllm:request_prompt_tokens":                "a per-request token-count histogram; llmtrace counts tokens, it keeps no distribution of them",
	"vllm:request_generation_tokens":            "a per-request token-count histogram; llmtrace counts tokens, it keeps no distribution of them",
	"vllm:request_max_num_generation_tokens":    "the max_tokens request parameter is a span attribute in llmtrace, not a metric",
	"vllm:request_params_max_tokens":            "the max_tokens request parameter is a span attribute in llmtrace, not a metric",
	"vllm:request_params_n":                     "the n request parameter is a span attribute in llmtrace, not a metric",
	"vllm:iteration_tokens_total":               "tokens per engine step; llmtrace records requests, not step sizes",
	"vllm:num_requests_swapped":                 "vLLM V0 only: V1 and llmtrace's engines preempt by recompute, nothing is swapped",
	"vllm:cpu_cache_usage_perc":                 "vLLM V0 only (the CPU swap space)",
	"vllm:gpu_prefix_cache_hit_rate":            "vLLM V0 only; the rate is hits / queries of vllm:prefix_cache_*",
	"vllm:cpu_prefix_cache_hit_rate":            "vLLM V0 only",
	"vllm:avg_prompt_throughput_toks_per_s":     "vLLM V0 only; rate(vllm:prompt_tokens_total) replaces it",
	"vllm:avg_generation_throughput_toks_per_s": "vLLM V0 only; rate(vllm:generation_tokens_total) replaces it",
	"vllm:cache_config_info":                    "vLLM's engine configuration, which llmtrace does not know",
	"vllm:lora_requests_info":                   "LoRA adapters are not recorded as metrics",
}

// vllmSeries maps every series name of the supported vLLM metrics to its
// metric, and of the unsupported ones to their reason.
func vllmSeries() (supported map[string]vllmMetric, unsupported map[string]string) {
	supported, unsupported = map[string]vllmMetric{}, map[string]string{}
	for _, m := range vllmMetrics() {
		for _, s := range seriesOf(m.name, m.kind) {
			supported[s] = m
		}
	}
	for name, why := range vllmUnsupported {
		for _, s := range []string{name, name + "_total", name + "_bucket", name + "_sum", name + "_count"} {
			unsupported[s] = why
		}
	}
	return supported, unsupported
}

// seriesOf is the series names of a metric of that kind.
func seriesOf(name, kind string) []string {
	switch kind {
	case "histogram":
		return []string{name + "_bucket", name + "_sum", name + "_count"}
	case "counter":
		return []string{name + "_total"}
	}
	return []string{name}
}

// exportedName is the Prometheus name of an llmtrace instrument, from what
// the Go SDK's exporter produces for it (names and units from package
// attributes): a histogram's base name, or the counter's or gauge's name.
func exportedName(t *testing.T, exported map[string]bool, instrument string) string {
	t.Helper()
	base := strings.ReplaceAll(instrument, ".", "_")
	for _, suffix := range []string{"_seconds", "_ratio", "_total", ""} {
		if exported[base+suffix] || exported[base+suffix+"_count"] {
			return base + suffix
		}
	}
	t.Fatalf("the exporter produces no series for %s", instrument)
	return ""
}

// vllmStyleQueries are queries in the form vLLM's dashboards and alerts use,
// one or two per supported metric, for model.
func vllmStyleQueries(model string) []promQuery {
	sel := fmt.Sprintf(`{model_name=%q}`, model)
	var out []promQuery
	for _, m := range vllmMetrics() {
		switch m.kind {
		case "histogram":
			out = append(out,
				promQuery{m.name + " p90", fmt.Sprintf(`histogram_quantile(0.9, sum by (le) (rate(%s_bucket%s[5m])))`, m.name, sel)},
				promQuery{m.name + " mean", fmt.Sprintf(`rate(%s_sum%s[5m]) / rate(%s_count%s[5m])`, m.name, sel, m.name, sel)})
		case "counter":
			out = append(out, promQuery{m.name, fmt.Sprintf(`sum by (engine) (rate(%s_total%s[5m]))`, m.name, sel)})
		case "gauge":
			out = append(out, promQuery{m.name, fmt.Sprintf(`max by (model_name, engine) (%s%s)`, m.name, sel)})
		}
	}
	return append(out, promQuery{"vllm:request_success by finished_reason",
		fmt.Sprintf(`sum by (finished_reason) (increase(vllm:request_success_total%s[5m]))`, sel)})
}

// TestVLLMRecordingRules reads deploy's rule file: it records exactly the
// supported vLLM series (three per histogram, with le kept by copying
// _bucket to _bucket) and reads only series llmtrace really exports.
func TestVLLMRecordingRules(t *testing.T) {
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, vllmRules, &f)
	exported := goExporterSeries(t)
	recorded := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if _, dup := recorded[r.Record]; dup {
				t.Errorf("%s is recorded twice", r.Record)
			}
			recorded[r.Record] = r.Expr
		}
	}
	supported, unsupported := vllmSeries()
	for name, m := range supported {
		expr, ok := recorded[name]
		if !ok {
			t.Errorf("no rule records %s", name)
			continue
		}
		// A histogram series comes from the same series of the source
		// histogram (le kept); anything else from the source metric.
		src := exportedName(t, exported, m.from)
		want := src
		if m.kind == "histogram" {
			want = src + name[strings.LastIndex(name, "_"):]
		}
		names := seriesNames(expr)
		if !slices.Contains(names, want) && !(strings.HasPrefix(name, "vllm:gpu_prefix") && len(names) == 1) {
			t.Errorf("%s is recorded from %v, want from %s", name, names, want)
		}
	}
	for name, expr := range recorded {
		if _, ok := unsupported[name]; ok {
			t.Errorf("%s is recorded, yet listed as unsupported", name)
		}
		if _, ok := supported[name]; !ok && !strings.HasPrefix(name, "llmtrace:") {
			t.Errorf("%s is recorded but not in this test's table of vLLM metrics", name)
		}
		for _, s := range seriesNames(expr) {
			if _, rec := recorded[s]; !exported[s] && !rec {
				t.Errorf("%s reads %s, which llmtrace does not export and no rule records", name, s)
			}
		}
	}
	t.Logf("%d rules give %d vLLM series of %d metrics", len(recorded), len(supported), len(vllmMetrics()))
}

// metricNameRE finds the metric names in PromQL once strings, selectors'
// matchers, ranges, grouping clauses and function names are out of the way.
var (
	rePromString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	rePromMatchers = regexp.MustCompile(`\{[^}]*\}`)
	rePromRange    = regexp.MustCompile(`\[[^\]]*\]`)
	rePromGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	rePromIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "offset": true, "inf": true, "nan": true}
)

// seriesNames returns the metric names an expression selects, in order.
func seriesNames(expr string) []string {
	s := rePromString.ReplaceAllString(expr, `""`)
	s = rePromMatchers.ReplaceAllString(s, " ")
	s = rePromRange.ReplaceAllString(s, " ")
	s = rePromGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range rePromIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(s[loc[0]-1])) {
			continue // a number's exponent or a duration's unit
		}
		call := strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(")
		if call || promKeywords[strings.ToLower(name)] || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestSeriesNames(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by(le) (rate(vllm:e2e_request_latency_seconds_bucket{model_name="$model_name"}[$__rate_interval])))`, []string{"vllm:e2e_request_latency_seconds_bucket"}},
		{"rate(a_sum{x=\"1\"}[5m])\n/\nrate(a_count[5m]) or label_replace(vector(0), \"error_type\", \"none\", \"\", \"\")", []string{"a_sum", "a_count"}},
		{`max by (job, instance) (g) * on (job, instance) group_right () llmtrace:served_model:info > 1e-3`, []string{"g", "llmtrace:served_model:info"}},
		{`group by (job) ({__name__=~"a|b"}) and on (job) target_info{service_name!=""}`, []string{"target_info"}},
	} {
		if got := seriesNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("seriesNames(%s) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// vllmDashboardPaths are vLLM's own Grafana dashboards to check, when this
// machine has them: LLMTRACE_VLLM_DASHBOARDS (paths separated by the OS's
// list separator), else every *.json in ../shared/vllm-dashboards next to
// the repository. They are vLLM's files (Apache-2.0), not this
// repository's, so they are not committed here; the one the README's
// Compatibility section was checked against is
// examples/observability/prometheus_grafana/grafana.json of
// github.com/vllm-project/vllm at commit
// 4b5c627c23e6690b8987100d1cbf78e34ac14bf9.
func vllmDashboardPaths(t *testing.T) []string {
	t.Helper()
	if v := strings.TrimSpace(os.Getenv("LLMTRACE_VLLM_DASHBOARDS")); v != "" {
		return filepath.SplitList(v)
	}
	paths, _ := filepath.Glob(filepath.Join(repoRoot(t), "..", "shared", "vllm-dashboards", "*.json"))
	return paths
}
