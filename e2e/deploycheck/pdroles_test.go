package deploycheck

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/internal/freeport"
)

// perTierSeries are the series a request of a P/D deployment counts in once
// per tracker it passes (SPEC §7): the router's, without llm_pd_role (what
// the client saw), the prefill instance's and the decode instance's.
var perTierSeries = func() []string {
	var out []string
	for _, h := range []string{"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
		"gen_ai_server_request_duration_seconds", "llm_server_inter_token_latency_seconds",
		"llm_server_queue_duration_seconds", "llm_server_prefill_duration_seconds",
		"llm_server_decode_duration_seconds", "llm_server_inference_duration_seconds"} {
		out = append(out, h+"_bucket", h+"_sum", h+"_count")
	}
	return append(out, "llm_server_requests_total", "llm_server_prompt_tokens_total", "llm_server_generation_tokens_total")
}()

var rePerTierSelector = regexp.MustCompile(`\b(` + strings.Join(perTierSeries, "|") + `)\{`)

// withRole adds the label matcher m (e.g. llm_pd_role="") to every selector
// of a perTier series in expr (the dashboard's selectors all have braces).
func withRole(expr, m string) string {
	return rePerTierSelector.ReplaceAllString(expr, "${1}{"+m+", ")
}

// TestDashboardPDRoles runs the demo's disaggregated serving (-pd: a router,
// a prefill and a decode instance, each with its own tracker, in one
// process and one service, as one Prometheus job), scraped directly, and
// evaluates every dashboard panel over the perTier series at one instant
// after the run:
//
//   - what a panel shows without llm_pd_role must be the same query over
//     the router's series alone: a panel that adds the tiers up counts each
//     request three times (P's remote_decode, D's and the router's stop) and
//     blends the client's TTFT with P's and D's own;
//   - where the instances have series of their own, the panel shows them
//     apart, with their llm_pd_role.
func TestDashboardPDRoles(t *testing.T) {
	promBin, err := testbackend.PrometheusBin()
	if err != nil {
		if os.Getenv(testbackend.EnvCI) != "" {
			t.Fatalf("no prometheus and CI is set: %v", err)
		}
		t.Skipf("no prometheus (%v); apt-get install -y --no-install-recommends prometheus", err)
	}
	const n = 60
	const service = "simengine-pd"
	metricsAddr := freeport.Addr(t)
	base := startPrometheus(t, promBin, metricsAddr, "simengine")
	demo := startDemo(t, []string{"-workload", "synthetic", "-requests", strconv.Itoa(n), "-synthetic-rate", "20",
		"-seed", "7", "-realtime", "-pd", "-linger", "10m", "-quiet", "-metrics-addr", metricsAddr},
		[]string{"OTEL_SERVICE_NAME=" + service, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none"})
	select {
	case <-demo.finished:
	case <-time.After(4 * time.Minute):
		t.Fatal("the P/D demo did not finish its run within 4 minutes")
	}
	// Every tier finished every request, and Prometheus has scraped it.
	for _, role := range []string{"", "prefill", "decode"} {
		expr := fmt.Sprintf(`sum(llm_server_requests_total{job="simengine", llm_pd_role=%q})`, role)
		if err := promWaitEqual(t, base, expr, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	d := loadGrafanaDashboard(t, filepath.Join(repoRoot(t), dashboardFile))
	vs, err := resolveVariables(t, base, d, map[string]string{"service": service})
	if err != nil {
		t.Fatal(err)
	}
	at := strconv.FormatFloat(float64(time.Now().UnixMilli())/1000, 'f', 3, 64)
	checked := 0
	for _, q := range d.promQueries() {
		if !rePerTierSelector.MatchString(q.expr) {
			continue
		}
		checked++
		expr := vs.interpolate(q.expr)
		got := promInstantAt(t, base, expr, at)
		router := promInstantAt(t, base, withRole(expr, `llm_pd_role=""`), at)
		instances := promInstantAt(t, base, withRole(expr, `llm_pd_role!=""`), at)

		shown := map[string]string{}
		apart := false
		for k, v := range got {
			if role, rest := splitRole(k); role == "" {
				shown[rest] = v
			} else {
				apart = true
			}
		}
		if !sameValues(shown, router) {
			t.Errorf("%s: without llm_pd_role the panel shows %v, the router's series alone give %v (%s)", q.where, shown, router, expr)
		}
		hasInstances := false
		for k := range instances {
			if role, _ := splitRole(k); role != "" {
				hasInstances = true
			}
		}
		if hasInstances && !apart {
			t.Errorf("%s: the prefill and decode instances have series, but the panel shows none with llm_pd_role (%s)", q.where, expr)
		}
	}
	if checked == 0 {
		t.Fatal("no dashboard query over the per-tier series")
	}
	if !t.Failed() {
		t.Logf("%d panel queries over the per-tier series keep the router's, P's and D's series apart", checked)
	}
}

// promInstantAt evaluates expr at the Unix time at and returns each series'
// value keyed by its label set (name{a="x",b="y"}, labels sorted).
func promInstantAt(t *testing.T, base, expr, at string) map[string]string {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := promGet(t, base+"/api/v1/query?"+url.Values{"query": {expr}, "time": {at}}.Encode(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "success" {
		t.Fatalf("%s: %s", expr, r.Error)
	}
	out := map[string]string{}
	for _, e := range r.Data.Result {
		var ls []string
		for k, v := range e.Metric {
			ls = append(ls, fmt.Sprintf("%s=%q", k, v))
		}
		sort.Strings(ls)
		v, _ := e.Value[1].(string)
		out["{"+strings.Join(ls, ",")+"}"] = v
	}
	return out
}

var reRoleLabel = regexp.MustCompile(`llm_pd_role="([^"]*)",?`)

// splitRole takes llm_pd_role out of a label-set key.
func splitRole(key string) (role, rest string) {
	m := reRoleLabel.FindStringSubmatch(key)
	if m == nil {
		return "", key
	}
	rest = strings.Replace(key, m[0], "", 1)
	return m[1], strings.Replace(rest, ",}", "}", 1)
}

// sameValues compares two results series by series (NaN equals NaN; the
// same data summed in another order may differ in the last bits).
func sameValues(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			return false
		}
		x, err1 := strconv.ParseFloat(av, 64)
		y, err2 := strconv.ParseFloat(bv, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if math.IsNaN(x) && math.IsNaN(y) {
			continue
		}
		if math.Abs(x-y) > 1e-9*math.Max(1, math.Max(math.Abs(x), math.Abs(y))) {
			return false
		}
	}
	return true
}
