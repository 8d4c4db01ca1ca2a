package deploycheck

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// What Grafana does with a dashboard's Prometheus queries, done here against
// a real Prometheus: resolve the template variables in order (label_values
// and query_result queries, their regex, multi-value and All handling), then
// interpolate them into every panel query the way Grafana's Prometheus
// datasource formats values.

type grafanaDashboard struct {
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []grafanaVar `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID      int             `json:"id"`
	Title   string          `json:"title"`
	Type    string          `json:"type"`
	Targets []grafanaTarget `json:"targets"`
	Panels  []grafanaPanel  `json:"panels"` // a collapsed row's panels
	Links   []struct {
		URL string `json:"url"`
	} `json:"links"`
}

type grafanaTarget struct {
	RefID      string            `json:"refId"`
	Expr       string            `json:"expr"`
	Datasource grafanaDatasource `json:"datasource"`
	QueryType  string            `json:"queryType"`
	Service    string            `json:"service"`
}

// grafanaDatasource is a datasource reference: an object with a type, or
// (older dashboards) a bare name.
type grafanaDatasource struct {
	Type string
}

func (d *grafanaDatasource) UnmarshalJSON(b []byte) error {
	var o struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &o); err == nil {
		d.Type = o.Type
		return nil
	}
	var name string
	return json.Unmarshal(b, &name) // a name: the type is unknown
}

type grafanaVar struct {
	Name       string            `json:"name"`
	Type       string            `json:"type"`
	Hide       int               `json:"hide"`
	Datasource grafanaDatasource `json:"datasource"`
	Query      json.RawMessage   `json:"query"`
	Regex      string            `json:"regex"`
	Multi      bool              `json:"multi"`
	IncludeAll bool              `json:"includeAll"`
	AllValue   string            `json:"allValue"`
	Current    grafanaCurrent    `json:"current"`
}

// grafanaCurrent is a variable's saved selection.
type grafanaCurrent struct {
	Value json.RawMessage `json:"value"`
}

// query is the variable's query text: a string, or an object's "query".
func (v grafanaVar) query() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// selectsAll reports whether the saved selection is All.
func (v grafanaVar) selectsAll() bool {
	return v.IncludeAll && strings.Contains(string(v.Current.Value), "$__all")
}

func loadGrafanaDashboard(t *testing.T, path string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// allPanels flattens rows.
func (d grafanaDashboard) allPanels() []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// promQuery is one Prometheus target of a dashboard.
type promQuery struct {
	where string // panel title / refId
	expr  string // as written, variables not substituted
}

func (d grafanaDashboard) promQueries() []promQuery {
	var out []promQuery
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) != "" && (tg.Datasource.Type == "" || tg.Datasource.Type == "prometheus") {
				out = append(out, promQuery{fmt.Sprintf("%s/%s", p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	return out
}

// grafanaVars are resolved template variables.
type grafanaVars struct {
	values  map[string][]string // selected values
	def     map[string]grafanaVar
	options map[string][]string // what each variable offered
	// builtin are Grafana's own variables ($__rate_interval, …).
	builtin map[string]string
}

// resolveVariables evaluates the dashboard's variables in order against the
// Prometheus at base, as Grafana does on load. want names the value to
// select for a variable (it must be among the options); otherwise a saved
// All selects every option, and anything else the first.
func resolveVariables(t *testing.T, base string, d grafanaDashboard, want map[string]string) (*grafanaVars, error) {
	t.Helper()
	vs := &grafanaVars{
		values: map[string][]string{}, def: map[string]grafanaVar{}, options: map[string][]string{},
		// A 5m window covers a whole demo run and the checks after it;
		// Grafana's would be 4 × the scrape interval.
		builtin: map[string]string{"__rate_interval": "5m", "__interval": "15s", "__range": "15m"},
	}
	for _, v := range d.Templating.List {
		vs.def[v.Name] = v
		var opts []string
		switch v.Type {
		case "datasource":
			opts = []string{"prometheus"}
		case "query":
			var err error
			if opts, err = vs.runVariableQuery(t, base, v); err != nil {
				return vs, fmt.Errorf("variable %s: %w", v.Name, err)
			}
		default:
			return vs, fmt.Errorf("variable %s: type %q is not handled by this test", v.Name, v.Type)
		}
		vs.options[v.Name] = opts
		switch w, ok := want[v.Name]; {
		case ok:
			if !slices.Contains(opts, w) {
				return vs, fmt.Errorf("variable %s offers %q, not %q", v.Name, opts, w)
			}
			vs.values[v.Name] = []string{w}
		case len(opts) == 0:
			return vs, fmt.Errorf("variable %s (%s) offers nothing", v.Name, v.query())
		case v.selectsAll():
			vs.values[v.Name] = opts
		default:
			vs.values[v.Name] = opts[:1]
		}
	}
	return vs, nil
}

var (
	reLabelValues = regexp.MustCompile(`^label_values\(\s*(?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	reQueryResult = regexp.MustCompile(`^query_result\((.*)\)$`)
)

// runVariableQuery runs a query variable's query and applies its regex.
func (vs *grafanaVars) runVariableQuery(t *testing.T, base string, v grafanaVar) ([]string, error) {
	t.Helper()
	q := strings.TrimSpace(vs.interpolate(v.query()))
	var texts []string
	if m := reLabelValues.FindStringSubmatch(q); m != nil {
		u := base + "/api/v1/label/" + m[2] + "/values"
		if m[1] != "" {
			u += "?" + url.Values{"match[]": {m[1]}}.Encode()
		}
		var r struct {
			Status string   `json:"status"`
			Error  string   `json:"error"`
			Data   []string `json:"data"`
		}
		if err := promGet(t, u, &r); err != nil {
			return nil, err
		}
		if r.Status != "success" {
			return nil, fmt.Errorf("%s: %s", q, r.Error)
		}
		texts = r.Data
	} else if m := reQueryResult.FindStringSubmatch(q); m != nil {
		samples, err := promInstant(t, base, m[1])
		if err != nil {
			return nil, err
		}
		// Grafana's text per series: name{label="value", …} value timestamp.
		for _, s := range samples {
			var b strings.Builder
			b.WriteString(s.labels["__name__"])
			b.WriteByte('{')
			first := true
			for _, k := range sortedKeys(s.labels) {
				if k == "__name__" {
					continue
				}
				if !first {
					b.WriteString(", ")
				}
				first = false
				fmt.Fprintf(&b, "%s=%q", k, s.labels[k])
			}
			fmt.Fprintf(&b, "} %s %d", s.value, s.ts)
			texts = append(texts, b.String())
		}
	} else {
		return nil, fmt.Errorf("query %q is neither label_values() nor query_result()", q)
	}
	return applyVariableRegex(v.Regex, texts)
}

// applyVariableRegex keeps what a variable's /regex/ matches: the first
// capture group, or the whole match.
func applyVariableRegex(re string, texts []string) ([]string, error) {
	var rx *regexp.Regexp
	if re != "" {
		body, ok := strings.CutPrefix(re, "/")
		i := strings.LastIndex(body, "/")
		if !ok || i < 0 {
			return nil, fmt.Errorf("regex %q is not /…/", re)
		}
		var err error
		if rx, err = regexp.Compile(body[:i]); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range texts {
		if rx != nil {
			m := rx.FindStringSubmatch(s)
			if m == nil {
				continue
			}
			s = m[0]
			if len(m) > 1 {
				s = m[1]
			}
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out, nil
}

var reGrafanaVar = regexp.MustCompile(`\$(\w+)|\[\[(\w+)\]\]|\$\{(\w+)\}`)

// interpolate substitutes the resolved variables into a Prometheus query as
// Grafana's Prometheus datasource does: a single-valued variable as is
// (backslashes and single quotes escaped), a multi-value or All variable as
// a regex alternation of its escaped values, All with an allValue as that
// value. Unknown names ($1 in a label_replace) stay as written.
func (vs *grafanaVars) interpolate(s string) string {
	return reGrafanaVar.ReplaceAllStringFunc(s, func(m string) string {
		sm := reGrafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		if b, ok := vs.builtin[name]; ok {
			return b
		}
		vals, ok := vs.values[name]
		if !ok {
			return m
		}
		v := vs.def[name]
		if !v.Multi && !v.IncludeAll {
			return promRegularEscape(vals[0])
		}
		if v.selectsAll() && v.AllValue != "" && len(vals) == len(vs.options[name]) {
			return v.AllValue
		}
		esc := make([]string, len(vals))
		for i, x := range vals {
			esc[i] = promRegexEscape(x)
		}
		if len(esc) == 1 {
			return esc[0]
		}
		return "(" + strings.Join(esc, "|") + ")"
	})
}

func promRegularEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\\'`).Replace(s)
}

// promRegexEscape is Grafana's prometheusSpecialRegexEscape: regex
// metacharacters get a backslash that survives PromQL's string unescaping.
func promRegexEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\\\`)
		case strings.ContainsRune(`$^*{}[]'+?.()|`, r):
			b.WriteString(`\\`)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unresolved returns the $name references left in s that are Grafana
// variables nobody defined (not $1 and the like).
func unresolved(s string) []string {
	var out []string
	for _, m := range reGrafanaVar.FindAllStringSubmatch(s, -1) {
		name := m[1] + m[2] + m[3]
		if _, err := strconv.Atoi(name); err != nil {
			out = append(out, m[0])
		}
	}
	return out
}

type promSample struct {
	labels map[string]string
	value  string
	ts     int64
}

// promInstant evaluates an instant query now.
func promInstant(t *testing.T, base, expr string) ([]promSample, error) {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := promGet(t, base+"/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s, want vector", expr, r.Data.ResultType)
	}
	out := make([]promSample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		ts, _ := e.Value[0].(float64)
		v, _ := e.Value[1].(string)
		out = append(out, promSample{labels: e.Metric, value: v, ts: int64(ts * 1000)})
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestGrafanaInterpolation(t *testing.T) {
	vs := &grafanaVars{
		values: map[string][]string{"service": {"svc.a"}, "job": {"ns/svc.a", "direct"}, "model": {"m1", "m2"}, "one": {"10.0.0.1:80"}},
		def: map[string]grafanaVar{
			"service": {Name: "service"},
			"job":     {Name: "job", Multi: true, IncludeAll: true, Current: grafanaCurrent{json.RawMessage(`["$__all"]`)}},
			"model":   {Name: "model", Multi: true, IncludeAll: true, AllValue: ".*", Current: grafanaCurrent{json.RawMessage(`["$__all"]`)}},
			"one":     {Name: "one", Multi: true},
		},
		options: map[string][]string{"job": {"ns/svc.a", "direct"}, "model": {"m1", "m2"}, "one": {"10.0.0.1:80", "x"}},
		builtin: map[string]string{"__rate_interval": "1m"},
	}
	for _, c := range []struct{ in, want string }{
		{`x{job=~"$job", model=~"$model"}[$__rate_interval]`, `x{job=~"(ns/svc\\.a|direct)", model=~".*"}[1m]`},
		{`label_replace(v, "s", "$service", "", "") and on(s) y{i=~"${one}"}`, `label_replace(v, "s", "svc.a", "", "") and on(s) y{i=~"10\\.0\\.0\\.1:80"}`},
		{`label_replace(x, "a", "$1", "b", "(.*)") $nope`, `label_replace(x, "a", "$1", "b", "(.*)") $nope`},
	} {
		if got := vs.interpolate(c.in); got != c.want {
			t.Errorf("interpolate(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	if got := unresolved(`a "$1" $__x ${y} [[z]]`); !slices.Equal(got, []string{"$__x", "${y}", "[[z]]"}) {
		t.Errorf("unresolved = %q", got)
	}
	got, err := applyVariableRegex(`/service_name="([^"]+)"/`, []string{`{job="a", service_name="s2"} 1 0`, `{service_name="s1"} 1 0`, `{job="b"} 1 0`, `{service_name="s2"} 1 0`})
	if err != nil || !slices.Equal(got, []string{"s1", "s2"}) {
		t.Errorf("regex: %q, %v", got, err)
	}
}
