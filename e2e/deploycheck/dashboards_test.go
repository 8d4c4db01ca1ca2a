package deploycheck

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/internal/freeport"
)

// The demo run the dashboards are checked against: the synthetic workload
// paced in real time (so Prometheus sees every counter move between
// scrapes), with prompts beyond a 3000-token context window failing
// (error.type context_length_exceeded), one client in seven disconnecting
// halfway (abort), and a KV cache small enough to preempt.
const (
	demoService   = "simengine-dash"
	demoNamespace = "llmtrace-e2e"
	demoModel     = "llama-3-8b" // the demo's default -model
)

var demoArgs = []string{
	"-workload", "synthetic", "-requests", "240", "-synthetic-rate", "12", "-seed", "7",
	"-realtime", "-abort-rate", "0.15", "-max-model-len", "3000", "-kv-blocks", "1024", "-spec-decode",
	"-linger", "10m", "-quiet",
}

// demoProcess is the built demo running as a child process.
type demoProcess struct {
	logs     *logBuffer
	finished chan struct{} // closed when the run is over and /metrics lingers
}

// startDemo builds examples/simengine and runs it with args and env (on top
// of this process' environment without OTEL_*), until the test ends.
func startDemo(t *testing.T, args, env []string) *demoProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "simengine")
	build := exec.Command("go", "build", "-o", bin, "./examples/simengine")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "LLMTRACE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	d := &demoProcess{logs: &logBuffer{}, finished: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = d.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(stdout)
		seen := false
		for sc.Scan() {
			fmt.Fprintln(d.logs, sc.Text())
			if !seen && strings.HasPrefix(sc.Text(), "serving http") {
				seen = true
				close(d.finished)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		// SIGTERM ends the linger; the demo flushes its telemetry and exits.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { <-copied; _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("demo output:\n%s", d.logs.String())
		}
	})
	return d
}

// optionalCollector returns the collector binary, or why there is none
// (without skipping the test).
func optionalCollector(t *testing.T) (bin, why string) {
	t.Helper()
	collectorOnce.Do(func() {
		collectorPath, collectorSkip, collectorErr = findOrBuildCollector(repoRoot(t))
	})
	if collectorErr != nil {
		t.Fatal(collectorErr)
	}
	return collectorPath, collectorSkip
}

// TestDashboardsOnDemo runs the demo with failures, aborts and preemptions
// in it, exporting its traces to a real Jaeger (through the collector with
// the deploy config when there is one) and its metrics two ways: served on
// /metrics and scraped directly by a Prometheus whose job name is not the
// service's, and (with the collector) over OTLP to the collector, scraped
// as docker-compose's Prometheus does. Both Prometheus servers run
// deploy/prometheus/prometheus.yml with the vLLM recording rules. Then:
//
//   - the bundled dashboard, its variables resolved as Grafana does: the
//     Service picker offers exactly the demo's service.name on both paths,
//     every panel query returns data (failure and health panels included,
//     their counters never moved or not), and the traces panel's service
//     has traces in Jaeger;
//   - every vLLM series the rules give exists with model_name and engine,
//     equals its llmtrace source one to one, keeps le, and answers
//     vLLM-style queries;
//   - every query of vLLM's own dashboards (when this machine has them, see
//     vllmDashboardPaths) returns data, except those of vllmUnsupported,
//     which must return none.
func TestDashboardsOnDemo(t *testing.T) {
	promBin, err := testbackend.PrometheusBin()
	if err != nil {
		if os.Getenv(testbackend.EnvCI) != "" {
			t.Fatalf("no prometheus and CI is set: %v", err)
		}
		t.Skipf("no prometheus (%v); apt-get install -y --no-install-recommends prometheus", err)
	}
	j := testbackend.StartJaeger(t)
	metricsAddr := freeport.Addr(t)
	env := []string{
		"OTEL_SERVICE_NAME=" + demoService,
		"OTEL_RESOURCE_ATTRIBUTES=service.namespace=" + demoNamespace,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
	}
	colBin, noCollector := optionalCollector(t)
	var colPromAddr string
	if noCollector == "" {
		cfg, grpcPort, promPort, healthPort := collectorTestConfig(t, j.OTLPGRPCEndpoint())
		start(t, colBin, "--config=file:"+cfg)
		waitHTTP(t, "collector", fmt.Sprintf("http://127.0.0.1:%d/", healthPort), 30*time.Second)
		colPromAddr = fmt.Sprintf("127.0.0.1:%d", promPort)
		env = append(env, fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", grpcPort), "OTEL_METRIC_EXPORT_INTERVAL=500")
	} else {
		t.Logf("no collector (%s): checking the direct scrape only, traces straight to Jaeger", noCollector)
		env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.OTLPGRPCEndpoint(), "OTEL_METRICS_EXPORTER=none")
	}
	direct := startPrometheus(t, promBin, metricsAddr, "simengine")
	var viaCollector string
	if colPromAddr != "" {
		viaCollector = startPrometheus(t, promBin, colPromAddr, "")
	}
	demo := startDemo(t, append(slices.Clone(demoArgs), "-metrics-addr", metricsAddr), env)

	// Variables resolve once a request has finished on each path.
	for _, base := range []string{direct, viaCollector} {
		if base == "" {
			continue
		}
		if _, err := promWaitValue(t, base, `vllm:request_success_total`, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var checks []dashboardCheck
	bundled := loadGrafanaDashboard(t, filepath.Join(repoRoot(t), dashboardFile))
	checks = append(checks, bundledDashboardCheck(t, "llmtrace dashboard, direct scrape", direct, bundled,
		demoService, "simengine", metricsAddr))
	if viaCollector != "" {
		checks = append(checks, bundledDashboardCheck(t, "llmtrace dashboard, through the collector", viaCollector, bundled,
			demoService, demoNamespace+"/"+demoService, colPromAddr))
	}
	checks = append(checks, dashboardCheck{name: "vLLM-style queries", base: direct, queries: vllmStyleQueries(demoModel)})
	checks = append(checks, vllmDashboardChecks(t, direct)...)

	// Poll every check's queries together while the demo runs and for a
	// while after it (the rate windows still cover the run), so one query
	// that never answers does not starve the others of time.
	over := make(chan struct{})
	go func() {
		select {
		case <-demo.finished:
		case <-time.After(4 * time.Minute):
		}
		close(over)
	}()
	for _, msg := range waitForChecks(t, checks, over, 30*time.Second) {
		t.Error(msg)
	}
	// What follows counts the whole run: wait for its end.
	select {
	case <-demo.finished:
	case <-over:
		select {
		case <-demo.finished:
		default:
			t.Fatal("the demo did not finish its run within 4 minutes")
		}
	}
	for _, c := range checks {
		for _, q := range c.noData {
			if ok, _ := promHasValue(t, c.base, c.vars.interpolate(q.expr)); ok {
				t.Errorf("%s: %s returns data, yet %s is listed as unsupported; update vllmUnsupported and the README", c.name, q.where, q.expr)
			}
		}
	}
	if !t.Failed() {
		for _, c := range checks {
			t.Logf("%s: all %d queries return data%s", c.name, len(c.queries), c.note)
		}
	}
	checkDemoHadTrouble(t, direct)
	checkTracesPanel(t, j, bundled, checks)
	checkVLLMSeries(t, direct)
}

// dashboardCheck is a set of queries that must all return data from base.
type dashboardCheck struct {
	name    string
	base    string
	vars    *grafanaVars
	queries []promQuery
	noData  []promQuery // must return nothing (unsupported)
	note    string
}

// bundledDashboardCheck resolves the llmtrace dashboard's variables against
// base and checks they name the service and its series.
func bundledDashboardCheck(t *testing.T, name, base string, d grafanaDashboard, service, job, instance string) dashboardCheck {
	t.Helper()
	vs, err := resolveVariables(t, base, d, map[string]string{"service": service})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if got := vs.options["service"]; !slices.Equal(got, []string{service}) {
		t.Errorf("%s: the Service picker offers %q, want exactly [%s]", name, got, service)
	}
	if got := vs.values["job"]; !slices.Equal(got, []string{job}) {
		t.Errorf("%s: $job is %q, want [%s]", name, got, job)
	}
	if got := vs.values["instance"]; instance != "" && !slices.Equal(got, []string{instance}) {
		t.Errorf("%s: $instance is %q, want [%s]", name, got, instance)
	}
	if got := vs.options["model"]; !slices.Equal(got, []string{demoModel}) {
		t.Errorf("%s: the Model picker offers %q, want [%s]", name, got, demoModel)
	}
	return dashboardCheck{name: name, base: base, vars: vs, queries: d.promQueries(),
		note: fmt.Sprintf(" (service %s: job %q, instance %q)", service, vs.values["job"], vs.values["instance"])}
}

// vllmDashboardChecks loads vLLM's own dashboards, if any, and splits their
// queries into those that must return data and the unsupported ones.
func vllmDashboardChecks(t *testing.T, base string) []dashboardCheck {
	t.Helper()
	paths := vllmDashboardPaths(t)
	if len(paths) == 0 {
		t.Logf("no vLLM dashboard on this machine (LLMTRACE_VLLM_DASHBOARDS, or ../shared/vllm-dashboards/*.json): " +
			"its queries are not checked; the vLLM-style queries and series checks still run")
		return nil
	}
	supported, unsupported := vllmSeries()
	var out []dashboardCheck
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		d := loadGrafanaDashboard(t, p)
		vs, err := resolveVariables(t, base, d, map[string]string{"model_name": demoModel})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		c := dashboardCheck{name: fmt.Sprintf("vLLM dashboard %q (%s)", d.Title, filepath.Base(p)), base: base, vars: vs}
		var why []string
		for _, q := range d.promQueries() {
			if u := unresolved(vs.interpolate(q.expr)); len(u) > 0 {
				t.Errorf("%s: %s: unknown variables %q", c.name, q.where, u)
			}
			reason := ""
			for _, s := range seriesNames(q.expr) {
				if r, ok := unsupported[s]; ok {
					reason = s + ": " + r
				} else if _, ok := supported[s]; !ok && strings.HasPrefix(s, "vllm:") {
					t.Errorf("%s: %s queries %s, which is neither given by the rules nor listed as unsupported", c.name, q.where, s)
				}
			}
			if reason != "" {
				c.noData = append(c.noData, q)
				why = append(why, q.where+" ("+reason+")")
				continue
			}
			c.queries = append(c.queries, q)
		}
		c.note = fmt.Sprintf("; %d cannot: %s", len(c.noData), strings.Join(why, "; "))
		t.Logf("%s: sha256 %s, %d Prometheus queries", p, hex.EncodeToString(sum[:]), len(c.queries)+len(c.noData))
		out = append(out, c)
	}
	return out
}

// waitForData polls every query (its variables interpolated) until each has
// returned a number once, or timeout passes; it returns one message per
// query that never did.
func waitForData(t *testing.T, base string, vs *grafanaVars, qs []promQuery, timeout time.Duration) []string {
	t.Helper()
	done := make(chan struct{})
	close(done)
	return waitForChecks(t, []dashboardCheck{{base: base, vars: vs, queries: qs}}, done, timeout)
}

// waitForChecks polls the queries of every check in rounds until each has
// returned a number once, or grace has passed since finished was closed; it
// returns one message per query that never did.
func waitForChecks(t *testing.T, checks []dashboardCheck, finished <-chan struct{}, grace time.Duration) []string {
	t.Helper()
	pending := make([][]promQuery, len(checks))
	for i, c := range checks {
		pending[i] = c.queries
	}
	var deadline time.Time
	for {
		left := 0
		for i, c := range checks {
			var still []promQuery
			for _, q := range pending[i] {
				if ok, _ := promHasValue(t, c.base, c.expr(q)); !ok {
					still = append(still, q)
				}
			}
			pending[i] = still
			left += len(still)
		}
		if deadline.IsZero() {
			select {
			case <-finished:
				deadline = time.Now().Add(grace)
			default:
			}
		}
		if left == 0 || (!deadline.IsZero() && time.Now().After(deadline)) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var msgs []string
	for i, c := range checks {
		for _, q := range pending[i] {
			_, detail := promHasValue(t, c.base, c.expr(q))
			msgs = append(msgs, fmt.Sprintf("%s%s: no data for %s (%s)", c.prefix(), q.where, c.expr(q), detail))
		}
	}
	return msgs
}

// expr is q with the check's variables interpolated.
func (c dashboardCheck) expr(q promQuery) string {
	if c.vars == nil {
		return q.expr
	}
	return c.vars.interpolate(q.expr)
}

func (c dashboardCheck) prefix() string {
	if c.name == "" {
		return ""
	}
	return c.name + ": "
}

// promWaitValue polls an instant query until it returns a number.
func promWaitValue(t *testing.T, base, expr string, timeout time.Duration) (float64, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		samples, err := promInstant(t, base, expr)
		if err == nil && len(samples) > 0 {
			if f, perr := strconv.ParseFloat(samples[0].value, 64); perr == nil && !math.IsNaN(f) {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: no value within %v (last error: %v)", expr, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// promValue is the single value of a scalar-like query (0 when empty).
func promValue(t *testing.T, base, expr string) float64 {
	t.Helper()
	samples, err := promInstant(t, base, expr)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 {
		return 0
	}
	if len(samples) > 1 {
		t.Fatalf("%s: %d series, want one", expr, len(samples))
	}
	f, err := strconv.ParseFloat(samples[0].value, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// checkDemoHadTrouble makes sure the run really had what the failure
// panels show: failures, aborts and preemptions.
func checkDemoHadTrouble(t *testing.T, base string) {
	t.Helper()
	for _, c := range []struct{ what, expr string }{
		{"failed requests", `sum(llm_server_requests_total{llm_finish_reason="error"})`},
		{"aborted requests", `sum(llm_server_requests_total{llm_finish_reason="abort"})`},
		{"preemptions", `sum(llm_server_preemptions_total)`},
	} {
		if v := promValue(t, base, c.expr); v <= 0 {
			t.Errorf("the demo run had no %s (%s = %v)", c.what, c.expr, v)
		} else {
			t.Logf("demo run: %v %s", v, c.what)
		}
	}
	// The counters that never moved have no series: their panels show 0
	// only because of the dashboard's fallbacks.
	var absent []string
	for _, s := range []string{"llm_rejected_updates_total", "llm_spans_dropped_total", "llm_spans_clamped_total", "llm_server_requests_evicted_total"} {
		if samples, err := promInstant(t, base, s); err == nil && len(samples) == 0 {
			absent = append(absent, s)
		}
	}
	t.Logf("counters that never moved (no series; the health panel shows 0 for them): %v", absent)
}

// checkTracesPanel checks the bundled dashboard's Jaeger panel and links
// ask Jaeger for a service that has the demo's traces, on every path.
func checkTracesPanel(t *testing.T, j *testbackend.Jaeger, d grafanaDashboard, checks []dashboardCheck) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range checks {
		if !strings.HasPrefix(c.name, "llmtrace dashboard") {
			continue
		}
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				if tg.Datasource.Type != "jaeger" {
					continue
				}
				service := c.vars.interpolate(tg.Service)
				var n int
				for n == 0 && ctx.Err() == nil {
					traces, err := j.FindTraces(ctx, service, 5)
					if err != nil {
						t.Fatalf("%s: Jaeger search for %q: %v", c.name, service, err)
					}
					if n = len(traces); n == 0 {
						time.Sleep(500 * time.Millisecond)
					}
				}
				if n == 0 {
					services, _ := j.Services(ctx)
					t.Errorf("%s: panel %q asks Jaeger for service %q, which has no traces (Jaeger has %q)", c.name, p.Title, service, services)
				}
			}
			for _, l := range p.Links {
				if u := c.vars.interpolate(l.URL); strings.Contains(u, ":16686/") && !strings.Contains(u, "service="+demoService) {
					t.Errorf("%s: panel %q links to %s", c.name, p.Title, u)
				}
			}
		}
	}
}

// checkVLLMSeries compares every vLLM series with its llmtrace source once
// the run is over and the values no longer move: one to one (same count of
// series, same sums), the vLLM labels on every series, le kept, and vLLM's
// bucket boundaries where llmtrace promises them.
func checkVLLMSeries(t *testing.T, base string) {
	t.Helper()
	exported := goExporterSeries(t)
	for _, m := range vllmMetrics() {
		src := exportedName(t, exported, m.from)
		for _, s := range seriesOf(m.name, m.kind) {
			from := src
			if m.kind == "histogram" {
				from = src + s[strings.LastIndex(s, "_"):]
			}
			agg := "sum"
			if m.kind == "gauge" {
				agg = "max"
			}
			want := promValue(t, base, fmt.Sprintf("%s(%s)", agg, from))
			if err := promWaitEqual(t, base, fmt.Sprintf("%s(%s)", agg, s), want, 15*time.Second); err != nil {
				t.Errorf("%s: %v (from %s = %v)", s, err, from, want)
			}
			if m.kind != "gauge" {
				if n, nsrc := promValue(t, base, "count("+s+")"), promValue(t, base, "count("+from+")"); n != nsrc {
					t.Errorf("%s has %v series, %s %v: the rule must copy series one to one", s, n, from, nsrc)
				}
			}
			if n, all := promValue(t, base, fmt.Sprintf(`count(%s{model_name=%q, engine="0"})`, s, demoModel)), promValue(t, base, "count("+s+")"); n != all || n == 0 {
				t.Errorf("%s: %v of %v series carry model_name=%q, engine=\"0\"", s, n, all, demoModel)
			}
		}
		if m.kind == "histogram" {
			checkBuckets(t, base, m, src)
		}
	}
	if got, want := promValue(t, base, `sum(vllm:request_success_total{finished_reason="abort"})`),
		promValue(t, base, `sum(llm_server_requests_total{llm_finish_reason="abort"})`); got != want || got == 0 {
		t.Errorf(`vllm:request_success_total{finished_reason="abort"} = %v, llmtrace's aborts %v`, got, want)
	}
}

// checkBuckets compares le values: the vLLM histogram's must be its
// source's, and hold all of vLLM's boundaries where m.subset says so.
func checkBuckets(t *testing.T, base string, m vllmMetric, src string) {
	t.Helper()
	les := func(series string) []float64 {
		samples, err := promInstant(t, base, "group by (le) ("+series+")")
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, s := range samples {
			f, err := strconv.ParseFloat(s.labels["le"], 64)
			if err != nil {
				t.Fatalf("%s: le %q: %v", series, s.labels["le"], err)
			}
			out = append(out, f)
		}
		slices.Sort(out)
		return out
	}
	got, want := les(m.name+"_bucket"), les(src+"_bucket")
	if !slices.Equal(got, want) || len(got) == 0 || !math.IsInf(got[len(got)-1], 1) {
		t.Errorf("%s_bucket le = %v, %s_bucket le = %v: the rule must keep le, +Inf included", m.name, got, src, want)
		return
	}
	var shared, missing []float64
	for _, b := range m.vllmBuckets {
		if slices.Contains(got, b) {
			shared = append(shared, b)
		} else {
			missing = append(missing, b)
		}
	}
	if m.subset && len(missing) > 0 {
		t.Errorf("%s: llmtrace's %s lacks vLLM's boundaries %v", m.name, src, missing)
	}
	t.Logf("%s: %d of vLLM's %d boundaries are llmtrace's too; not: %v", m.name, len(shared), len(m.vllmBuckets), missing)
}

// promWaitEqual polls a one-value query until it equals want.
func promWaitEqual(t *testing.T, base, expr string, want float64, timeout time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := promValue(t, base, expr)
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s = %v, want %v", expr, got, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
