package testbackend

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/internal/freeport"
)

// Prometheus is a running Prometheus server started by StartPrometheus.
type Prometheus struct {
	t      testing.TB
	proc   *process
	port   int
	client *http.Client
}

// Sample is one element of a query result: a series' labels (including
// __name__ where the result keeps it) and its value at the evaluation time.
type Sample struct {
	Labels map[string]string
	Value  float64
	Time   time.Time
}

// StartPrometheus starts Prometheus on a free port with a fresh TSDB in a
// temp dir, scraping every target at scrapeInterval (>= 10ms; a few hundred
// ms keeps tests quick), and waits until it is ready. A target is host:port
// (scraped at /metrics) or a full URL such as http://127.0.0.1:9464/metrics.
// All targets land in job "llmtrace" when they share scheme and path; else
// the further groups are jobs "llmtrace_2", "llmtrace_3", ….
// It stops Prometheus when t ends. With no prometheus binary (see
// PrometheusBin) it skips t, or fails t when CI is set.
func StartPrometheus(t testing.TB, scrapeTargets []string, scrapeInterval time.Duration) *Prometheus {
	t.Helper()
	bin, err := PrometheusBin()
	requireBinary(t, "Prometheus", err)
	if scrapeInterval < 10*time.Millisecond {
		t.Fatalf("testbackend: scrape interval %v is below 10ms", scrapeInterval)
	}

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	cfg, err := prometheusConfig(scrapeTargets, scrapeInterval)
	if err != nil {
		t.Fatalf("testbackend: %v", err)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatalf("testbackend: writing Prometheus config: %v", err)
	}

	const attempts = 3
	for attempt := 1; ; attempt++ {
		ports := freeport.Ports(t, 1)
		p := &Prometheus{t: t, port: ports[0], client: &http.Client{Timeout: 10 * time.Second}}
		p.proc = &process{
			name: "prometheus",
			bin:  bin,
			args: []string{
				"--config.file=" + cfgPath,
				"--storage.tsdb.path=" + filepath.Join(dir, fmt.Sprintf("tsdb-%d", attempt)),
				"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.port),
				"--storage.tsdb.retention.time=1h",
				"--log.level=info",
			},
			logPath: filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt)),
			env:     childEnv(nil),
		}
		err = p.start()
		if err == nil {
			p.proc.registerLogOnFailure(t)
			t.Cleanup(func() {
				if err := p.proc.stop(); err != nil {
					t.Errorf("testbackend: %v", err)
				}
			})
			return p
		}
		_ = p.proc.stop()
		log := p.proc.logTail(32 << 10)
		if attempt < attempts && strings.Contains(log, "address already in use") {
			t.Logf("testbackend: Prometheus lost a port race, retrying on a new port: %v", err)
			continue
		}
		t.Fatalf("testbackend: %v\nPrometheus log (%s):\n%s", err, p.proc.logPath, log)
	}
}

func (p *Prometheus) start() error {
	if err := p.proc.start(); err != nil {
		return err
	}
	ctx, cancel := startContext(p.t)
	defer cancel()
	return waitReady(ctx, p.proc, p.URL()+"/-/ready")
}

// prometheusConfig renders prometheus.yml. JSON is valid YAML, so the
// config is built as JSON and needs no YAML library.
func prometheusConfig(targets []string, interval time.Duration) ([]byte, error) {
	type group struct{ scheme, path string }
	var order []group
	byGroup := map[group][]string{}
	for _, tg := range targets {
		g := group{scheme: "http", path: "/metrics"}
		host := tg
		if strings.Contains(tg, "://") {
			u, err := url.Parse(tg)
			if err != nil {
				return nil, fmt.Errorf("scrape target %q: %w", tg, err)
			}
			g.scheme, host = u.Scheme, u.Host
			if u.Path != "" {
				g.path = u.Path
			}
		}
		if host == "" {
			return nil, fmt.Errorf("scrape target %q has no host:port", tg)
		}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], host)
	}
	iv := fmt.Sprintf("%dms", interval.Milliseconds())
	var jobs []map[string]any
	for i, g := range order {
		name := "llmtrace"
		if i > 0 {
			name = fmt.Sprintf("llmtrace_%d", i+1)
		}
		jobs = append(jobs, map[string]any{
			"job_name":        name,
			"scheme":          g.scheme,
			"metrics_path":    g.path,
			"scrape_interval": iv,
			"scrape_timeout":  iv,
			"static_configs":  []map[string]any{{"targets": byGroup[g]}},
		})
	}
	return json.MarshalIndent(map[string]any{
		"global": map[string]any{
			"scrape_interval":     iv,
			"scrape_timeout":      iv,
			"evaluation_interval": iv,
		},
		"scrape_configs": jobs,
	}, "", "  ")
}

// URL is Prometheus's base URL (web UI and HTTP API).
func (p *Prometheus) URL() string { return "http://127.0.0.1:" + strconv.Itoa(p.port) }

// LogPath is the file Prometheus's output goes to.
func (p *Prometheus) LogPath() string { return p.proc.logPath }

// Query evaluates promql now (GET /api/v1/query). An instant vector comes
// back as one Sample per series, sorted by labels; a scalar as one Sample
// without labels. Range vectors and strings are errors.
func (p *Prometheus) Query(ctx context.Context, promql string) ([]Sample, error) {
	body, err := httpGet(ctx, p.client, p.URL()+"/api/v1/query?"+url.Values{"query": {promql}}.Encode())
	if err != nil {
		return nil, err
	}
	return decodePromResult(promql, body)
}

// QueryValue evaluates promql and returns its single value; it is an error
// unless the result is a scalar or a one-series vector.
func (p *Prometheus) QueryValue(ctx context.Context, promql string) (float64, error) {
	s, err := p.Query(ctx, promql)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("query %q: want 1 series, got %d: %v", promql, len(s), s)
	}
	return s[0].Value, nil
}

// WaitForSeries polls promql until it returns at least one sample and
// returns the result, or fails when ctx ends. If ctx has no deadline, it
// gives up after 30 s.
func (p *Prometheus) WaitForSeries(ctx context.Context, promql string) ([]Sample, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var (
		res []Sample
		err error
	)
	ok := poll(ctx, func() bool {
		res, err = p.Query(ctx, promql)
		return err == nil && len(res) > 0
	})
	if ok {
		return res, nil
	}
	last := "no series"
	if err != nil {
		last = err.Error()
	}
	return nil, fmt.Errorf("waiting for series of %q: %w; last: %s", promql, context.Cause(ctx), last)
}

type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

func decodePromResult(promql string, body []byte) ([]Sample, error) {
	var r promResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: decoding response: %w", promql, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", promql, r.ErrorType, r.Error)
	}
	switch r.Data.ResultType {
	case "scalar":
		var pt [2]any
		if err := json.Unmarshal(r.Data.Result, &pt); err != nil {
			return nil, fmt.Errorf("query %q: decoding scalar: %w", promql, err)
		}
		s, err := promPoint(pt)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", promql, err)
		}
		return []Sample{s}, nil
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
			return nil, fmt.Errorf("query %q: decoding vector: %w", promql, err)
		}
		out := make([]Sample, 0, len(vec))
		for _, e := range vec {
			s, err := promPoint(e.Value)
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", promql, err)
			}
			s.Labels = e.Metric
			out = append(out, s)
		}
		slices.SortFunc(out, func(a, b Sample) int {
			return strings.Compare(labelKey(a.Labels), labelKey(b.Labels))
		})
		return out, nil
	default:
		return nil, fmt.Errorf("query %q: unsupported result type %q", promql, r.Data.ResultType)
	}
}

func promPoint(pt [2]any) (Sample, error) {
	ts, ok := pt[0].(float64)
	if !ok {
		return Sample{}, fmt.Errorf("bad sample timestamp %v", pt[0])
	}
	vs, ok := pt[1].(string)
	if !ok {
		return Sample{}, fmt.Errorf("bad sample value %v", pt[1])
	}
	v, err := strconv.ParseFloat(vs, 64) // handles NaN, +Inf, -Inf
	if err != nil {
		return Sample{}, fmt.Errorf("bad sample value %q: %w", vs, err)
	}
	return Sample{Value: v, Time: time.UnixMilli(int64(ts * 1000))}, nil
}

func labelKey(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
		b.WriteByte(',')
	}
	return b.String()
}
