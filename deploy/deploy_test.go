package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/llmtrace/llmtrace/attributes"
)

const (
	dashboardPath        = "grafana/dashboards/llmtrace.json"
	datasourcesPath      = "grafana/provisioning/datasources/datasources.yaml"
	prometheusConfigPath = "prometheus/prometheus.yml"
	vllmRulesPath        = "prometheus/vllm.rules.yml"
)

// ---------------------------------------------------------------------------
// The exposition: what the OpenTelemetry Prometheus exporter really produces.

type instrumentKind int

const (
	histogram instrumentKind = iota
	counter
	gauge
	intGauge
)

type instrument struct {
	name    string
	kind    instrumentKind
	unit    string
	buckets []float64
	// One measurement is recorded per attribute set, so every label the
	// dashboard may select or group by shows up in the exposition.
	attrSets [][]attribute.KeyValue
}

// instruments is SPEC §4 as a table: every metric name in package attributes
// with its instrument kind, unit and attributes, as otelstats creates and
// records them (otelstats/metrics.go, finalize.go, schedstats.go). TestInstrumentsCoverAttributes
// fails when package attributes gains a metric this table lacks.
func instruments() []instrument {
	base := []attribute.KeyValue{
		attributes.OperationName.String("chat"),
		attributes.RequestModel.String("demo-model"),
	}
	with := func(kv ...attribute.KeyValue) []attribute.KeyValue {
		return append(slices.Clone(base), kv...)
	}
	req := [][]attribute.KeyValue{base}
	none := [][]attribute.KeyValue{nil}
	decode := [][]attribute.KeyValue{with(attributes.PDRole.String("decode"))}
	// A request of a P/D deployment is recorded by each tracker it passes
	// (SPEC §7): the router's without a role, the prefill and decode
	// instances' with llm.pd.role.
	prefill, dec := attributes.PDRole.String("prefill"), attributes.PDRole.String("decode")
	tiers := func(kv ...attribute.KeyValue) [][]attribute.KeyValue {
		return [][]attribute.KeyValue{with(kv...), with(append(kv, prefill)...), with(append(kv, dec)...)}
	}
	s, tok := attributes.UnitSeconds, attributes.UnitToken
	return []instrument{
		{attributes.MetricTimeToFirstToken, histogram, s, attributes.TimeToFirstTokenBuckets(), tiers()},
		{attributes.MetricTimePerOutputToken, histogram, s, attributes.TimePerOutputTokenBuckets(), tiers()},
		{attributes.MetricRequestDuration, histogram, s, attributes.RequestDurationBuckets(),
			append(tiers(), tiers(attributes.ErrorType.String("timeout"))...)},
		{attributes.MetricInterTokenLatency, histogram, s, attributes.InterTokenLatencyBuckets(), tiers()},
		{attributes.MetricQueueDuration, histogram, s, attributes.PhaseDurationBuckets(), tiers()},
		{attributes.MetricPrefillDuration, histogram, s, attributes.PhaseDurationBuckets(), tiers()},
		{attributes.MetricDecodeDuration, histogram, s, attributes.PhaseDurationBuckets(), tiers()},
		{attributes.MetricInferenceDuration, histogram, s, attributes.PhaseDurationBuckets(), tiers()},

		{attributes.MetricRequests, counter, attributes.UnitRequest, nil,
			append(tiers(attributes.FinishReason.String("stop")), tiers(attributes.FinishReason.String("length"))...)},
		{attributes.MetricPreemptions, counter, attributes.UnitPreempt, nil, req},
		{attributes.MetricPromptTokens, counter, tok, nil, tiers()},
		{attributes.MetricGenerationTokens, counter, tok, nil, tiers()},
		// Per request (with model), or from the engine's scheduler stats
		// (without), depending on which side reports prefix caching.
		{attributes.MetricPrefixCacheQuery, counter, tok, nil, [][]attribute.KeyValue{base, nil}},
		{attributes.MetricPrefixCacheHits, counter, tok, nil, [][]attribute.KeyValue{base, nil}},

		{attributes.MetricRequestsRunning, intGauge, attributes.UnitRequest, nil, none},
		{attributes.MetricRequestsWaiting, intGauge, attributes.UnitRequest, nil, none},
		{attributes.MetricKVCacheUsage, gauge, attributes.UnitRatio, nil, none},

		{attributes.MetricRejectedUpdates, counter, attributes.UnitUpdate, nil,
			[][]attribute.KeyValue{{attributes.RejectionReason.String("unknown_request")}}},
		{attributes.MetricSpansDropped, counter, attributes.UnitSpan, nil, none},
		{attributes.MetricSpansClamped, counter, attributes.UnitSpan, nil, none},
		{attributes.MetricRequestsEvicted, counter, attributes.UnitRequest, nil, none},
		{attributes.MetricAttributesTruncated, counter, "{attribute}", nil,
			[][]attribute.KeyValue{{attributes.TruncatedKey.String(string(attributes.RequestModel))}}},

		// SPEC §7–9, with the decode instance's role.
		{attributes.MetricKVTransferDuration, histogram, s, attributes.PhaseDurationBuckets(), decode},
		{attributes.MetricKVTransferTokens, counter, tok, nil, decode},
		{attributes.MetricKVTransferBytes, counter, attributes.UnitByte, nil, decode},
		{attributes.MetricKVTransferFailures, counter, attributes.UnitTransfer, nil, decode},
		{attributes.MetricSpecDraftTokens, counter, tok, nil, req},
		{attributes.MetricSpecAcceptedTokens, counter, tok, nil, req},
		{attributes.MetricSpecSteps, counter, attributes.UnitStep, nil, req},
		{attributes.MetricSpecAcceptedPerPosition, counter, tok, nil,
			[][]attribute.KeyValue{with(attributes.SpecPosition.Int(0)), with(attributes.SpecPosition.Int(1))}},
		{attributes.MetricSpecAcceptanceRate, histogram, attributes.UnitRatio, attributes.AcceptanceRateBuckets(), req},
		{attributes.MetricEncodeDuration, histogram, s, attributes.PhaseDurationBuckets(), req},
	}
}

// family is one metric family of the exposition.
type family struct {
	typ    string // COUNTER, GAUGE, HISTOGRAM
	labels map[string]bool
}

// exposition records one measurement per instrument through an SDK
// MeterProvider whose reader is the real Prometheus exporter, and returns
// the series names the registry then exposes (histograms as their _bucket,
// _sum and _count series) with their label names.
func exposition(t *testing.T) map[string]family {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m := mp.Meter("github.com/llmtrace/llmtrace")
	ctx := context.Background()
	for _, in := range instruments() {
		var record func(attribute.Set)
		switch in.kind {
		case histogram:
			h, err := m.Float64Histogram(in.name, metric.WithUnit(in.unit), metric.WithExplicitBucketBoundaries(in.buckets...))
			if err != nil {
				t.Fatal(err)
			}
			record = func(s attribute.Set) { h.Record(ctx, 0.042, metric.WithAttributeSet(s)) }
		case counter:
			c, err := m.Int64Counter(in.name, metric.WithUnit(in.unit))
			if err != nil {
				t.Fatal(err)
			}
			record = func(s attribute.Set) { c.Add(ctx, 3, metric.WithAttributeSet(s)) }
		case gauge:
			g, err := m.Float64Gauge(in.name, metric.WithUnit(in.unit))
			if err != nil {
				t.Fatal(err)
			}
			record = func(s attribute.Set) { g.Record(ctx, 0.5, metric.WithAttributeSet(s)) }
		case intGauge:
			g, err := m.Int64Gauge(in.name, metric.WithUnit(in.unit))
			if err != nil {
				t.Fatal(err)
			}
			record = func(s attribute.Set) { g.Record(ctx, 2, metric.WithAttributeSet(s)) }
		}
		for _, kvs := range in.attrSets {
			record(attribute.NewSet(kvs...))
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		typ := mf.GetType().String()
		name := mf.GetName()
		if typ == "HISTOGRAM" {
			bucket := map[string]bool{"le": true}
			for l := range labels {
				bucket[l] = true
			}
			out[name+"_bucket"] = family{typ, bucket}
			out[name+"_sum"] = family{typ, labels}
			out[name+"_count"] = family{typ, labels}
			continue
		}
		out[name] = family{typ, labels}
	}
	return out
}

// The names the exporter gives every instrument, written out once so a reader
// (and the report in deploy/README.md) can see them. The test fails when the
// exporter or package attributes disagree with this list.
var wantSeries = map[string]string{
	"gen_ai_server_time_to_first_token_seconds":                 "HISTOGRAM",
	"gen_ai_server_time_per_output_token_seconds":               "HISTOGRAM",
	"gen_ai_server_request_duration_seconds":                    "HISTOGRAM",
	"llm_server_inter_token_latency_seconds":                    "HISTOGRAM",
	"llm_server_queue_duration_seconds":                         "HISTOGRAM",
	"llm_server_prefill_duration_seconds":                       "HISTOGRAM",
	"llm_server_decode_duration_seconds":                        "HISTOGRAM",
	"llm_server_inference_duration_seconds":                     "HISTOGRAM",
	"llm_server_requests_total":                                 "COUNTER",
	"llm_server_preemptions_total":                              "COUNTER",
	"llm_server_prompt_tokens_total":                            "COUNTER",
	"llm_server_generation_tokens_total":                        "COUNTER",
	"llm_server_prefix_cache_queries_total":                     "COUNTER",
	"llm_server_prefix_cache_hits_total":                        "COUNTER",
	"llm_server_requests_running":                               "GAUGE",
	"llm_server_requests_waiting":                               "GAUGE",
	"llm_server_kv_cache_usage_ratio":                           "GAUGE",
	"llm_rejected_updates_total":                                "COUNTER",
	"llm_spans_dropped_total":                                   "COUNTER",
	"llm_spans_clamped_total":                                   "COUNTER",
	"llm_server_requests_evicted_total":                         "COUNTER",
	"llm_attributes_truncated_total":                            "COUNTER",
	"llm_server_kv_transfer_duration_seconds":                   "HISTOGRAM",
	"llm_server_kv_transfer_tokens_total":                       "COUNTER",
	"llm_server_kv_transfer_bytes_total":                        "COUNTER",
	"llm_server_kv_transfer_failures_total":                     "COUNTER",
	"llm_server_spec_decode_draft_tokens_total":                 "COUNTER",
	"llm_server_spec_decode_accepted_tokens_total":              "COUNTER",
	"llm_server_spec_decode_steps_total":                        "COUNTER",
	"llm_server_spec_decode_accepted_tokens_per_position_total": "COUNTER",
	"llm_server_spec_decode_acceptance_rate":                    "HISTOGRAM",
	"llm_server_encode_duration_seconds":                        "HISTOGRAM",
	"target_info":                                               "GAUGE",
}

func TestExporterNames(t *testing.T) {
	exp := exposition(t)
	got := map[string]string{}
	for name, f := range exp {
		if f.typ == "HISTOGRAM" {
			if base, ok := strings.CutSuffix(name, "_bucket"); ok {
				got[base] = f.typ
			}
			continue
		}
		got[name] = f.typ
	}
	for name, typ := range wantSeries {
		if got[name] != typ {
			t.Errorf("exporter: want %s %s, got %q", typ, name, got[name])
		}
	}
	for name, typ := range got {
		if _, ok := wantSeries[name]; !ok {
			t.Errorf("exporter produced %s %s, which this test does not expect", typ, name)
		}
	}
	// The metric attributes of SPEC §4 become these label names.
	for _, c := range []struct{ series, label string }{
		{"gen_ai_server_request_duration_seconds_count", "gen_ai_operation_name"},
		{"gen_ai_server_request_duration_seconds_count", "gen_ai_request_model"},
		{"gen_ai_server_request_duration_seconds_count", "error_type"},
		{"llm_server_requests_total", "llm_finish_reason"},
		{"llm_rejected_updates_total", "llm_rejection_reason"},
	} {
		if !exp[c.series].labels[c.label] {
			t.Errorf("%s has no label %s (labels: %v)", c.series, c.label, keys(exp[c.series].labels))
		}
	}
	if t.Failed() {
		t.Logf("exposition: %v", keys(got))
	}
}

// TestInstrumentsCoverAttributes reads package attributes' source and fails
// when it declares a metric name the instrument table above does not record,
// so a new metric cannot miss the dashboard checks.
func TestInstrumentsCoverAttributes(t *testing.T) {
	declared := metricConstants(t)
	table := map[string]bool{}
	for _, in := range instruments() {
		table[in.name] = true
	}
	for name, value := range declared {
		if !table[value] {
			t.Errorf("attributes.%s = %q is not in this test's instrument table (SPEC §4)", name, value)
		}
	}
	if len(declared) != len(table) {
		t.Errorf("attributes declares %d metric names, the table has %d", len(declared), len(table))
	}
}

// metricConstants returns the Metric* string constants of package attributes.
func metricConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "attributes", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		// integrations.go names the proxy's and the collector's own
		// counters, which are not SPEC §4 instruments of the tracker.
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "integrations.go" {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Metric") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[n.Name] = v
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no Metric* constants in package attributes")
	}
	return out
}

// ---------------------------------------------------------------------------
// The dashboard.

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource datasource      `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Links   []struct {
		Title string `json:"title"`
		URL   string `json:"url"`
	} `json:"links"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options any    `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string `json:"id"`
				Value any    `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

// unit is the display unit of target refID's values: the panel's default,
// unless an override matching that query (byFrameRefID) sets another.
func (p panel) unit(t *testing.T, refID string) string {
	t.Helper()
	u := p.FieldConfig.Defaults.Unit
	for _, o := range p.FieldConfig.Overrides {
		for _, pr := range o.Properties {
			if pr.ID != "unit" {
				continue
			}
			if o.Matcher.ID != "byFrameRefID" {
				t.Errorf("panel %q: a unit override matched by %q; this test knows byFrameRefID only", p.Title, o.Matcher.ID)
				continue
			}
			if o.Matcher.Options == refID {
				u, _ = pr.Value.(string)
			}
		}
	}
	return u
}

type target struct {
	RefID      string     `json:"refId"`
	Datasource datasource `json:"datasource"`
	Expr       string     `json:"expr"`
	QueryType  string     `json:"queryType"`
	Service    string     `json:"service"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if !json.Valid(b) {
		t.Fatalf("%s is not valid JSON", dashboardPath)
	}
	return d
}

// promExpr is one PromQL expression of the dashboard and where it sits.
type promExpr struct {
	where string
	expr  string
}

// promExprs returns every PromQL expression: panel targets, and the series
// selectors inside label_values() of template variables.
func promExprs(t *testing.T, d dashboard) []promExpr {
	t.Helper()
	var out []promExpr
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.Type == "prometheus" {
				out = append(out, promExpr{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	queryResult := regexp.MustCompile(`^query_result\((.*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" || v.Datasource.Type != "prometheus" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query is neither object nor string", v.Name)
			}
			q.Query = s
		}
		if m := queryResult.FindStringSubmatch(strings.TrimSpace(q.Query)); m != nil {
			out = append(out, promExpr{fmt.Sprintf("variable %s", v.Name), m[1]})
			continue
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Fatalf("variable %s: want label_values(series, label) or query_result(expr), got %q", v.Name, q.Query)
		}
		out = append(out, promExpr{fmt.Sprintf("variable %s", v.Name), m[1]})
	}
	return out
}

func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	if len(d.Panels) == 0 {
		t.Fatal("dashboard has no panels")
	}
	uids := provisionedDatasourceUIDs(t)
	ids := map[int]bool{}
	for i, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
		}
		for _, q := range d.Panels[:i] {
			if overlap(p, q) {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: missing or duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if !uids[tg.Datasource.UID] {
				t.Errorf("panel %q target %s: datasource uid %q is not provisioned in %s", p.Title, tg.RefID, tg.Datasource.UID, datasourcesPath)
			}
			switch tg.Datasource.Type {
			case "prometheus":
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
			case "jaeger":
				if tg.QueryType != "search" || tg.Service == "" {
					t.Errorf("panel %q target %s: want a Jaeger search by service", p.Title, tg.RefID)
				}
			default:
				t.Errorf("panel %q target %s: unexpected datasource type %q", p.Title, tg.RefID, tg.Datasource.Type)
			}
		}
	}
	// The way from the metrics to the traces.
	var jaegerPanel, jaegerLinks bool
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			jaegerPanel = jaegerPanel || tg.Datasource.Type == "jaeger"
		}
		for _, l := range p.Links {
			jaegerLinks = jaegerLinks || strings.Contains(l.URL, ":16686/")
		}
	}
	if !jaegerPanel || !jaegerLinks {
		t.Errorf("dashboard needs a Jaeger traces panel (%v) and data links to the Jaeger UI (%v)", jaegerPanel, jaegerLinks)
	}
}

func overlap(a, b panel) bool {
	ag, bg := a.GridPos, b.GridPos
	return ag.X < bg.X+bg.W && bg.X < ag.X+ag.W && ag.Y < bg.Y+bg.H && bg.Y < ag.Y+ag.H
}

// provisionedDatasourceUIDs reads the uid: lines of the datasource
// provisioning file (a full YAML parse happens in e2e/deploycheck).
func provisionedDatasourceUIDs(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(datasourcesPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:-\s*)?uid:\s*"?([A-Za-z0-9_-]+)"?\s*$`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// TestDashboardMetricsAreExported is the point of this package: every series
// the dashboard queries must be one the OpenTelemetry Prometheus exporter
// really produces from package attributes' names and units, used the way
// its type allows, with labels it really carries.
func TestDashboardMetricsAreExported(t *testing.T) {
	d := loadDashboard(t)
	exp := exposition(t)
	used := map[string]bool{}
	for _, pe := range promExprs(t, d) {
		q := parsePromQL(pe.expr)
		if len(q.metrics) == 0 {
			t.Errorf("%s: no metric in %q", pe.where, pe.expr)
		}
		for _, name := range q.metrics {
			used[name] = true
			if _, ok := exp[name]; !ok {
				t.Errorf("%s: %s is not produced by the exporter (%q)", pe.where, name, pe.expr)
			}
		}
		for _, name := range q.rated {
			f, ok := exp[name]
			if !ok {
				continue
			}
			if f.typ == "GAUGE" {
				t.Errorf("%s: rate() over gauge %s", pe.where, name)
			}
		}
		for _, name := range q.quantiled {
			if !strings.HasSuffix(name, "_bucket") || exp[name].typ != "HISTOGRAM" {
				t.Errorf("%s: histogram_quantile over %s, want a histogram's _bucket series", pe.where, name)
			}
		}
		// Label names in selectors must exist on that series; job and
		// instance come from the scrape (the collector sets them from
		// service.name and service.instance.id).
		for _, sel := range q.selectors {
			f := exp[sel.metric]
			for _, l := range sel.labels {
				if !f.labels[l] && l != "job" && l != "instance" {
					t.Errorf("%s: %s has no label %s", pe.where, sel.metric, l)
				}
			}
		}
		// Grouping labels must exist on some series of the expression.
		for _, l := range q.grouping {
			found := l == "job" || l == "instance"
			for _, name := range q.metrics {
				found = found || exp[name].labels[l]
			}
			if !found {
				t.Errorf("%s: groups by %s, which none of %v carries", pe.where, l, q.metrics)
			}
		}
	}
	// Every metric llmtrace emits has a place on the dashboard.
	for _, in := range instruments() {
		prefix := promName(t, exp, in.name)
		if !used[prefix] && !used[prefix+"_bucket"] && !used[prefix+"_count"] && !used[prefix+"_sum"] {
			t.Errorf("metric %s (%s) is on no panel", in.name, prefix)
		}
	}
	if t.Failed() {
		t.Logf("series the exporter produces: %v", keys(exp))
	}
}

// perTier are the metrics a request of a P/D deployment counts in once per
// tracker it passes (SPEC §7): the router's (no llm.pd.role: what the
// client saw), the prefill instance's and the decode instance's.
var perTier = []string{
	attributes.MetricTimeToFirstToken, attributes.MetricTimePerOutputToken, attributes.MetricRequestDuration,
	attributes.MetricInterTokenLatency, attributes.MetricQueueDuration, attributes.MetricPrefillDuration,
	attributes.MetricDecodeDuration, attributes.MetricInferenceDuration,
	attributes.MetricRequests, attributes.MetricPromptTokens, attributes.MetricGenerationTokens,
}

// TestDashboardKeepsPDRolesApart checks that no panel adds up the tiers of
// a P/D deployment: summed over llm_pd_role, each request would count two
// or three times (the router's, P's and D's finished request) and a TTFT
// quantile would blend the client's TTFT with P's and D's own. Every
// aggregation over a perTier series keeps llm_pd_role (or selects one).
func TestDashboardKeepsPDRolesApart(t *testing.T) {
	d := loadDashboard(t)
	exp := exposition(t)
	tier := map[string]bool{}
	for _, name := range perTier {
		p := promName(t, exp, name)
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if _, ok := exp[p+suffix]; ok {
				tier[p+suffix] = true
			}
		}
	}
	for _, pe := range promExprs(t, d) {
		q := parsePromQL(pe.expr)
		// A variable lists label values; only panels add series up.
		if !strings.HasPrefix(pe.where, "panel ") || slices.Contains(q.grouping, "llm_pd_role") {
			continue
		}
		for _, sel := range q.selectors {
			if tier[sel.metric] && !slices.Contains(sel.labels, "llm_pd_role") {
				t.Errorf("%s: aggregates %s over llm_pd_role (%q)", pe.where, sel.metric, pe.expr)
			}
		}
	}
}

// Grafana's units of durations and of data rates.
var (
	timeUnits = map[string]bool{"ns": true, "µs": true, "ms": true, "s": true, "m": true, "h": true, "d": true,
		"dtdurationms": true, "dtdurations": true, "dthms": true, "dtdhms": true, "clockms": true, "clocks": true}
	dataRateUnits = map[string]bool{"Bps": true, "binBps": true, "bps": true, "binbps": true,
		"KBs": true, "MBs": true, "GBs": true, "TBs": true, "Kbits": true, "Mbits": true, "Gbits": true}
)

// TestDashboardUnits checks that every query's values are shown in a unit
// that fits what the query computes: a duration unit for a quantile of a
// _seconds histogram, a data-rate unit for the rate of a _bytes counter,
// and neither for anything else. A rate of failed transfers shown in
// seconds reads as a latency, tokens per second shown in bytes per second
// as a bandwidth.
func TestDashboardUnits(t *testing.T) {
	d := loadDashboard(t)
	kind := func(timeUnit, dataRate bool) string {
		switch {
		case timeUnit:
			return "a duration"
		case dataRate:
			return "a data rate"
		}
		return "a plain number"
	}
	allSuffix := func(names []string, suffix string) bool {
		for _, n := range names {
			if !strings.HasSuffix(n, suffix) {
				return false
			}
		}
		return len(names) > 0
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.Type != "prometheus" {
				continue
			}
			q := parsePromQL(tg.Expr)
			want := kind(allSuffix(q.quantiled, "_seconds_bucket"),
				len(q.quantiled) == 0 && allSuffix(q.rated, "_bytes_total"))
			unit := p.unit(t, tg.RefID)
			if got := kind(timeUnits[unit], dataRateUnits[unit]); got != want {
				t.Errorf("panel %q target %s: unit %q shows %s, but %q computes %s", p.Title, tg.RefID, unit, got, tg.Expr, want)
			}
		}
	}
}

// promName finds the exposition name of an OpenTelemetry instrument name: the
// name with dots as underscores, plus whatever suffixes the exporter added.
func promName(t *testing.T, exp map[string]family, otelName string) string {
	t.Helper()
	base := strings.ReplaceAll(otelName, ".", "_")
	var best string
	for name := range exp {
		name = strings.TrimSuffix(name, "_bucket")
		name = strings.TrimSuffix(name, "_count")
		name = strings.TrimSuffix(name, "_sum")
		for _, suffix := range []string{"", "_seconds", "_ratio", "_total"} {
			if name == base+suffix {
				best = name
			}
		}
	}
	if best == "" {
		t.Errorf("no exposition name for %s", otelName)
	}
	return best
}

// ---------------------------------------------------------------------------
// A small PromQL reader: enough to find metric names, the label names in
// their selectors, grouping labels, and which metrics sit directly inside
// rate()/increase() or histogram_quantile().

type selector struct {
	metric string
	labels []string
}

type promQuery struct {
	metrics   []string
	selectors []selector
	grouping  []string
	rated     []string
	quantiled []string
}

var (
	reString   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	reVariable = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z]+)?\}?`)
	reSelector = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}`)
	reMatcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// Only plain alternations of names: anything else fails the metric check.
	reNameMatcher = regexp.MustCompile(`__name__\s*=~?\s*"([^"]*)"`)
	reGrouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	reRange       = regexp.MustCompile(`\[[^\]]*\]`)
	reOffset      = regexp.MustCompile(`\b(offset|@)\s*-?[0-9A-Za-z_.()]+`)
	reNumber      = regexp.MustCompile(`(^|[^A-Za-z0-9_:])(?:0[xX][0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+)`)
	reIdent       = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	reRated       = regexp.MustCompile(`\b(?:rate|irate|increase|delta|idelta|deriv|resets)\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
	reQuantiled   = regexp.MustCompile(`histogram_quantile\s*\([^,]*,\s*(?:[a-z_]+\s*(?:by|without)?\s*(?:\([^)]*\))?\s*\(\s*)*(?:rate|irate|increase)\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
	promKeyword   = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "offset": true,
		"inf": true, "nan": true, "atan2": true,
	}
)

func parsePromQL(expr string) promQuery {
	var q promQuery
	// Names selected by {__name__=~"a|b"} are metrics too.
	for _, m := range reNameMatcher.FindAllStringSubmatch(expr, -1) {
		for _, name := range strings.Split(m[1], "|") {
			if !slices.Contains(q.metrics, name) {
				q.metrics = append(q.metrics, name)
			}
		}
	}
	s := reString.ReplaceAllString(expr, `""`)
	s = reVariable.ReplaceAllString(s, "1m")
	for _, m := range reGrouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				q.grouping = append(q.grouping, l)
			}
		}
	}
	s = reGrouping.ReplaceAllString(s, " ")
	for _, m := range reSelector.FindAllStringSubmatch(s, -1) {
		sel := selector{metric: m[1]}
		for _, lm := range reMatcher.FindAllStringSubmatch(m[2], -1) {
			if lm[1] == "__name__" {
				continue
			}
			sel.labels = append(sel.labels, lm[1])
		}
		if sel.metric != "" {
			q.selectors = append(q.selectors, sel)
		}
	}
	s = reSelector.ReplaceAllString(s, "$1 ")
	s = reRange.ReplaceAllString(s, " ")
	s = reOffset.ReplaceAllString(s, " ")
	for _, m := range reRated.FindAllStringSubmatch(s, -1) {
		q.rated = append(q.rated, m[1])
	}
	for _, m := range reQuantiled.FindAllStringSubmatch(s, -1) {
		q.quantiled = append(q.quantiled, m[1])
	}
	s = reNumber.ReplaceAllString(s, "${1} ")
	for _, loc := range reIdent.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if promKeyword[strings.ToLower(word)] || strings.HasPrefix(rest, "(") {
			continue // an operator keyword or a function call
		}
		if !slices.Contains(q.metrics, word) {
			q.metrics = append(q.metrics, word)
		}
	}
	return q
}

func TestParsePromQL(t *testing.T) {
	q := parsePromQL(`histogram_quantile(0.99, sum by (le, job) (rate(a_seconds_bucket{job=~"$service", x="1e3"}[$__rate_interval])))`)
	if !slices.Equal(q.metrics, []string{"a_seconds_bucket"}) || !slices.Equal(q.quantiled, []string{"a_seconds_bucket"}) ||
		!slices.Equal(q.grouping, []string{"le", "job"}) || len(q.selectors) != 1 || !slices.Equal(q.selectors[0].labels, []string{"job", "x"}) {
		t.Errorf("quantile: %+v", q)
	}
	q = parsePromQL(`sum(rate(hits_total[5m])) / sum(rate(queries_total[5m] offset 1h)) * 100 > bool 0.5e-3 or vector(0)`)
	if !slices.Equal(q.metrics, []string{"hits_total", "queries_total"}) || !slices.Equal(q.rated, []string{"hits_total", "queries_total"}) {
		t.Errorf("ratio: %+v", q)
	}
	q = parsePromQL(`group by (job) ({__name__=~"a_total|b_total"}) and on (job) label_replace(c, "x", "$1", "y", "(.*)")`)
	if !slices.Equal(q.metrics, []string{"a_total", "b_total", "c"}) {
		t.Errorf("name matcher: %+v", q)
	}
	q = parsePromQL(`max(g{a!="b"}) / on(job) group_left(model) info`)
	if !slices.Equal(q.metrics, []string{"g", "info"}) || !slices.Equal(q.grouping, []string{"job", "model"}) || len(q.rated) != 0 {
		t.Errorf("join: %+v", q)
	}
}

// ---------------------------------------------------------------------------
// promtool: the Prometheus configuration, and every dashboard expression as
// real PromQL.

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not on PATH and CI is set; install it (apt-get install -y --no-install-recommends prometheus)")
		}
		t.Skip("promtool is not on PATH (apt-get install -y --no-install-recommends prometheus); skipping")
	}
	return p
}

func TestPrometheusConfig(t *testing.T) {
	bin := promtool(t)
	// Read it here too: go test's cache only notices files the test
	// process itself opens, not those promtool reads.
	for _, f := range []string{prometheusConfigPath, vllmRulesPath} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "check", "config", prometheusConfigPath).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config %s: %v\n%s", prometheusConfigPath, err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// TestDashboardPromQL hands every dashboard expression to promtool as a
// recording rule, so Prometheus' own parser checks its syntax. Grafana's
// variables are replaced by values of the right kind first.
func TestDashboardPromQL(t *testing.T) {
	bin := promtool(t)
	d := loadDashboard(t)
	replacer := strings.NewReplacer(
		"$__rate_interval", "1m", "$__interval", "15s", "$__range", "15m",
		"${service}", ".*", "$service", ".*", "${model}", ".*", "$model", ".*",
		"$job", ".*", "$instance", ".*",
	)
	// $1 and the like are label_replace's, not Grafana's.
	grafanaVar := regexp.MustCompile(`\$(?:\{|[A-Za-z_])`)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	exprs := promExprs(t, d)
	for i, pe := range exprs {
		expr := replacer.Replace(pe.expr)
		if grafanaVar.MatchString(expr) {
			t.Errorf("%s: unknown Grafana variable in %q", pe.where, pe.expr)
		}
		js, _ := json.Marshal(expr) // a JSON string is a valid YAML scalar
		fmt.Fprintf(&rules, "      - record: dashboard:expr_%d\n        expr: %s\n", i, js)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, rules.String())
	}
	t.Logf("%d expressions parse: %s", len(exprs), strings.TrimSpace(string(out)))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// vLLM's histogram boundaries (vllm/v1/metrics/loggers.py): TTFT; the
// inter-token latency and the per-request TPOT (the same list); e2e and
// the request phases (request_latency_buckets).
var (
	vllmTTFTBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	vllmRequestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// TestVLLMBucketBoundaries checks what deploy/README.md tells a vLLM user
// about the le values of the vLLM-named histograms (an alert on
// vllm:time_to_first_token_seconds_bucket{le="0.5"} finds its series only
// if llmtrace has that boundary): TTFT, TPOT and ITL have exactly vLLM's
// boundaries, the phases all of vLLM's, e2e none; and the README says so.
// It said TTFT and TPOT had other boundaries than vLLM's.
func TestVLLMBucketBoundaries(t *testing.T) {
	shared := func(ours, theirs []float64) (n int) {
		for _, b := range theirs {
			if slices.Contains(ours, b) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name       string
		ours, vllm []float64
		exact      bool
		wantShared int // of vLLM's boundaries, when not exact
	}{
		{"TTFT", attributes.TimeToFirstTokenBuckets(), vllmTTFTBuckets, true, 0},
		{"TPOT", attributes.TimePerOutputTokenBuckets(), vllmITLBuckets, true, 0},
		{"ITL", attributes.InterTokenLatencyBuckets(), vllmITLBuckets, true, 0},
		{"phases", attributes.PhaseDurationBuckets(), vllmRequestBuckets, false, len(vllmRequestBuckets)},
		{"e2e", attributes.RequestDurationBuckets(), vllmRequestBuckets, false, 0},
	} {
		if c.exact {
			if !slices.Equal(c.ours, c.vllm) {
				t.Errorf("%s: boundaries %v, deploy/README.md says they are vLLM's %v", c.name, c.ours, c.vllm)
			}
		} else if got := shared(c.ours, c.vllm); got != c.wantShared {
			t.Errorf("%s: %d of vLLM's %d boundaries, deploy/README.md says %d", c.name, got, len(c.vllm), c.wantShared)
		}
	}
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	for _, claim := range []string{
		"TTFT, TPOT (`vllm:request_time_per_output_token_seconds`) and inter-token latency have exactly vLLM's",
		"Only e2e differs",
	} {
		if !strings.Contains(readme, claim) {
			t.Errorf("deploy/README.md does not say %q", claim)
		}
	}
}
