package deploycheck

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"go.yaml.in/yaml/v3"
)

// Paths relative to the repository root.
const (
	composeFile      = "docker-compose.yml"
	collectorConfig  = "deploy/otel-collector/config.yaml"
	prometheusConfig = "deploy/prometheus/prometheus.yml"
	datasourcesFile  = "deploy/grafana/provisioning/datasources/datasources.yaml"
	dashboardsFile   = "deploy/grafana/provisioning/dashboards/dashboards.yaml"
	dashboardsDir    = "deploy/grafana/dashboards"
	dashboardFile    = "deploy/grafana/dashboards/llmtrace.json"
	builderConfig    = "e2e/deploycheck/otelcol/builder-config.yaml"
)

// repoRoot is the library's repository, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, composeFile)); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

func loadProject(t *testing.T) *types.Project {
	t.Helper()
	root := repoRoot(t)
	// No OS environment and no .env: the file must stand on its own.
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, composeFile)},
		cli.WithWorkingDirectory(root), cli.WithName("llmtrace"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose-go rejects %s: %v", composeFile, err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return s
}

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// ---------------------------------------------------------------------------
// docker-compose.yml

func TestComposeServices(t *testing.T) {
	p := loadProject(t)
	want := []string{"grafana", "jaeger", "otel-collector", "prometheus"}
	got := p.ServiceNames()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("services: got %v, want %v", got, want)
	}
}

// TestComposeImagesPinned: every image names a released tag, never latest,
// and the collector image is the release whose components
// TestCollectorValidates builds and runs.
func TestComposeImagesPinned(t *testing.T) {
	p := loadProject(t)
	wantRepo := map[string]struct{ repo, tagPrefix string }{
		"jaeger":         {"docker.io/jaegertracing/jaeger", "2."},
		"otel-collector": {"docker.io/otel/opentelemetry-collector-contrib", "0."},
		"prometheus":     {"docker.io/prom/prometheus", "v3."},
		"grafana":        {"docker.io/grafana/grafana", "1"},
	}
	for _, s := range p.Services {
		ref, err := reference.ParseNormalizedNamed(s.Image)
		if err != nil {
			t.Errorf("%s: image %q: %v", s.Name, s.Image, err)
			continue
		}
		tagged, ok := ref.(reference.Tagged)
		if !ok {
			t.Errorf("%s: image %q has no tag", s.Name, s.Image)
			continue
		}
		tag := tagged.Tag()
		if tag == "latest" || !strings.ContainsAny(tag, "0123456789") || strings.Contains(tag, "nightly") || strings.Contains(tag, "snapshot") {
			t.Errorf("%s: image %q is not pinned to a release", s.Name, s.Image)
		}
		if w, ok := wantRepo[s.Name]; ok && (ref.Name() != w.repo || !strings.HasPrefix(tag, w.tagPrefix)) {
			t.Errorf("%s: image %q, want %s:%s…", s.Name, s.Image, w.repo, w.tagPrefix)
		}
	}
	// The Jaeger image matches the Jaeger v2 the project tests against
	// (github.com/jaegertracing/jaeger v1.76.0 = v2.13.0).
	if img := service(t, p, "jaeger").Image; img != "jaegertracing/jaeger:2.13.0" {
		t.Errorf("jaeger image %q, want jaegertracing/jaeger:2.13.0", img)
	}
	// The collector image is the contrib release of the components we build.
	var bc struct {
		Exporters []struct {
			GoMod string `yaml:"gomod"`
		} `yaml:"exporters"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), builderConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &bc); err != nil {
		t.Fatal(err)
	}
	var contrib string
	for _, e := range bc.Exporters {
		if f := strings.Fields(e.GoMod); len(f) == 2 && strings.Contains(f[0], "opentelemetry-collector-contrib/") {
			contrib = strings.TrimPrefix(f[1], "v")
		}
	}
	if img := service(t, p, "otel-collector").Image; contrib == "" || !strings.HasSuffix(img, ":"+contrib) {
		t.Errorf("collector image %q is not the contrib release %q the builder config validates with", img, contrib)
	}
}

// TestComposeMountsExist: every file or directory the compose file mounts
// is in the repository, and mounted read-only.
func TestComposeMountsExist(t *testing.T) {
	p := loadProject(t)
	root := repoRoot(t)
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			rel, err := filepath.Rel(root, v.Source)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s: mounts %s from outside the repository", s.Name, v.Source)
				continue
			}
			fi, err := os.Stat(v.Source)
			if err != nil {
				t.Errorf("%s: mounted %s does not exist: %v", s.Name, rel, err)
				continue
			}
			if ext := filepath.Ext(v.Target); (ext == ".yaml" || ext == ".yml" || ext == ".json") == fi.IsDir() {
				t.Errorf("%s: %s (dir=%v) is mounted at %s", s.Name, rel, fi.IsDir(), v.Target)
			}
			if !v.ReadOnly {
				t.Errorf("%s: mount of %s is not read-only", s.Name, rel)
			}
		}
	}
}

// mountTarget returns where service s sees repository path rel.
func mountTarget(t *testing.T, s types.ServiceConfig, rel string) string {
	t.Helper()
	want := filepath.Join(repoRoot(t), rel)
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && filepath.Clean(v.Source) == want {
			return v.Target
		}
	}
	t.Fatalf("%s does not mount %s", s.Name, rel)
	return ""
}

// published maps the service's published host ports to container ports.
func published(s types.ServiceConfig) map[string]uint32 {
	out := map[string]uint32{}
	for _, p := range s.Ports {
		out[p.Published] = p.Target
	}
	return out
}

func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func hostPort(t *testing.T, where, endpoint string) (string, int) {
	t.Helper()
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		endpoint = u.Host
	}
	h, p, err := net.SplitHostPort(endpoint)
	if err != nil {
		t.Fatalf("%s: endpoint %q: %v", where, endpoint, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: port %q: %v", where, p, err)
	}
	return h, n
}

// TestComposeWiring follows the data from the app to Grafana through every
// config file and checks each hop names a service and a port that is really
// there.
func TestComposeWiring(t *testing.T) {
	p := loadProject(t)
	col := loadCollectorConfig(t)
	jaeger := service(t, p, "jaeger")
	otelcol := service(t, p, "otel-collector")
	prom := service(t, p, "prometheus")
	graf := service(t, p, "grafana")

	// The collector runs our config.
	cfgPath, ok := flagValue(otelcol.Command, "--config")
	if !ok || cfgPath != mountTarget(t, otelcol, collectorConfig) {
		t.Errorf("otel-collector command %v does not load the mounted %s", otelcol.Command, collectorConfig)
	}

	// app (host) → collector: OTLP gRPC 4317 and HTTP 4318 published on the
	// host, and the receiver listening on every interface of the container.
	ports := published(otelcol)
	for proto, port := range map[string]int{"grpc": 4317, "http": 4318} {
		ep := col.receiverEndpoint(t, "otlp", proto)
		h, n := hostPort(t, "otlp receiver "+proto, ep)
		if h != "0.0.0.0" && h != "" {
			t.Errorf("otlp %s receiver listens on %q, unreachable from outside the container", proto, h)
		}
		if n != port || ports[strconv.Itoa(port)] != uint32(port) {
			t.Errorf("OTLP %s: receiver port %d, host %d → container %d; want %d end to end", proto, n, port, ports[strconv.Itoa(port)], port)
		}
	}

	// collector → Jaeger: the traces pipeline exports OTLP to the jaeger
	// service on a port it exposes, and Jaeger's OTLP stays off the host.
	var jaegerExp string
	for _, e := range col.Service.Pipelines["traces"].Exporters {
		if strings.HasPrefix(e, "otlp") {
			jaegerExp = e
		}
	}
	if jaegerExp == "" {
		t.Fatal("traces pipeline has no OTLP exporter")
	}
	var exp struct {
		Endpoint string `yaml:"endpoint"`
		TLS      struct {
			Insecure bool `yaml:"insecure"`
		} `yaml:"tls"`
	}
	col.component(t, "exporters", jaegerExp, &exp)
	h, n := hostPort(t, jaegerExp, exp.Endpoint)
	if h != "jaeger" || !slices.Contains(jaeger.Expose, strconv.Itoa(n)) || n != 4317 {
		t.Errorf("%s endpoint %q: want jaeger:4317, exposed by the jaeger service (expose %v)", jaegerExp, exp.Endpoint, jaeger.Expose)
	}
	if !exp.TLS.Insecure {
		t.Errorf("%s: Jaeger's OTLP receiver in the compose network is plaintext; set tls.insecure", jaegerExp)
	}
	if _, ok := published(jaeger)["4317"]; ok {
		t.Error("jaeger publishes 4317 on the host, where the collector's OTLP port is")
	}
	if published(jaeger)["16686"] != 16686 {
		t.Error("jaeger does not publish its UI on 16686")
	}

	// collector → Prometheus: Prometheus scrapes the prometheus exporter.
	var pe struct {
		Endpoint          string `yaml:"endpoint"`
		EnableOpenMetrics bool   `yaml:"enable_open_metrics"`
	}
	col.component(t, "exporters", "prometheus", &pe)
	if !slices.Contains(col.Service.Pipelines["metrics"].Exporters, "prometheus") {
		t.Error("metrics pipeline does not export to prometheus")
	}
	h, expPort := hostPort(t, "prometheus exporter", pe.Endpoint)
	if h != "0.0.0.0" {
		t.Errorf("prometheus exporter listens on %q, unreachable from the prometheus container", h)
	}
	if !pe.EnableOpenMetrics {
		t.Error("prometheus exporter without enable_open_metrics drops exemplars")
	}
	pc := loadPrometheusConfig(t)
	var scraped bool
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				h, n := hostPort(t, "scrape target", tg)
				if h == "otel-collector" && n == expPort {
					scraped = true
					if !sc.HonorLabels {
						t.Errorf("scrape job %s: honor_labels false renames the collector's job/instance (service.name) to exported_job", sc.JobName)
					}
				}
			}
		}
	}
	if !scraped {
		t.Errorf("%s does not scrape otel-collector:%d", prometheusConfig, expPort)
	}
	if v, _ := flagValue(prom.Command, "--config.file"); v != mountTarget(t, prom, prometheusConfig) {
		t.Errorf("prometheus command %v does not load the mounted %s", prom.Command, prometheusConfig)
	}
	// Rule files resolve against the config's directory in the container;
	// each must be mounted there from deploy/prometheus/.
	if len(pc.RuleFiles) == 0 {
		t.Errorf("%s loads no rule files; the vLLM recording rules (%s) would be missing", prometheusConfig, vllmRules)
	}
	for _, rf := range pc.RuleFiles {
		rel := filepath.Join(filepath.Dir(prometheusConfig), rf)
		if want := path.Join(path.Dir(mountTarget(t, prom, prometheusConfig)), rf); mountTarget(t, prom, rel) != want {
			t.Errorf("rule file %s is mounted at %s, want %s", rel, mountTarget(t, prom, rel), want)
		}
	}
	if v, _ := flagValue(prom.Command, "--enable-feature"); !strings.Contains(v, "exemplar-storage") {
		t.Error("prometheus runs without --enable-feature=exemplar-storage: exemplars would be dropped")
	}
	if published(prom)["9090"] != 9090 {
		t.Error("prometheus does not publish 9090")
	}

	// Grafana → Prometheus and Jaeger.
	ds := loadDatasources(t)
	byType := map[string]datasourceConfig{}
	uids := map[string]string{}
	for _, d := range ds.Datasources {
		byType[d.Type] = d
		uids[d.UID] = d.Type
	}
	for typ, want := range map[string]struct {
		svc  types.ServiceConfig
		port int
	}{"prometheus": {prom, 9090}, "jaeger": {jaeger, 16686}} {
		d, ok := byType[typ]
		if !ok {
			t.Errorf("no %s datasource", typ)
			continue
		}
		h, n := hostPort(t, typ+" datasource", d.URL)
		if h != want.svc.Name || n != want.port {
			t.Errorf("%s datasource url %q, want http://%s:%d", typ, d.URL, want.svc.Name, want.port)
		}
	}
	ex := byType["prometheus"].JSONData.ExemplarTraceIDDestinations
	if len(ex) == 0 || ex[0].Name != "trace_id" || uids[ex[0].DatasourceUID] != "jaeger" {
		t.Errorf("prometheus datasource must link the trace_id exemplar label to the jaeger datasource: %+v", ex)
	}
	// Provisioning directories and the dashboards the provider reads.
	for rel, target := range map[string]string{
		filepath.Dir(datasourcesFile): "/etc/grafana/provisioning/datasources",
		filepath.Dir(dashboardsFile):  "/etc/grafana/provisioning/dashboards",
	} {
		if got := mountTarget(t, graf, rel); got != target {
			t.Errorf("grafana mounts %s at %s, want %s", rel, got, target)
		}
	}
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name                  string `yaml:"name"`
			Folder                string `yaml:"folder"`
			Type                  string `yaml:"type"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, dashboardsFile, &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path != mountTarget(t, graf, dashboardsDir) {
		t.Errorf("dashboard provider %+v does not read the mounted %s", prov.Providers, dashboardsDir)
	}
	home := graf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if home == nil || *home != filepath.Join(mountTarget(t, graf, dashboardsDir), filepath.Base(dashboardFile)) {
		t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH = %v, want the mounted %s", home, dashboardFile)
	}
	// The dashboard only uses provisioned datasources.
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Datasource struct{ Type, UID string } `json:"datasource"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			if uids[tg.Datasource.UID] != tg.Datasource.Type {
				t.Errorf("panel %q uses datasource %+v, not provisioned", pn.Title, tg.Datasource)
			}
		}
	}
	if published(graf)["3000"] != 3000 {
		t.Error("grafana does not publish 3000")
	}

	// No two services publish the same host port.
	seen := map[string]string{}
	for _, s := range p.Services {
		for hp := range published(s) {
			if other, ok := seen[hp]; ok {
				t.Errorf("host port %s published by %s and %s", hp, other, s.Name)
			}
			seen[hp] = s.Name
		}
	}
}

// TestDockerCompose129 runs Debian's docker-compose 1.29 over the file when
// it is installed: the file should work with the old Python implementation
// too (so no top-level name:).
func TestDockerCompose129(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose not on PATH (apt-get install -y --no-install-recommends docker-compose); compose-go checks still ran")
	}
	cmd := exec.Command(bin, "-f", composeFile, "config", "-q")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
}

// ---------------------------------------------------------------------------
// The collector config, structurally.

type pipeline struct {
	Receivers  []string `yaml:"receivers"`
	Processors []string `yaml:"processors"`
	Exporters  []string `yaml:"exporters"`
}

type collectorCfg struct {
	Extensions map[string]yaml.Node `yaml:"extensions"`
	Receivers  map[string]yaml.Node `yaml:"receivers"`
	Processors map[string]yaml.Node `yaml:"processors"`
	Exporters  map[string]yaml.Node `yaml:"exporters"`
	Connectors map[string]yaml.Node `yaml:"connectors"`
	Service    struct {
		Extensions []string            `yaml:"extensions"`
		Pipelines  map[string]pipeline `yaml:"pipelines"`
		Telemetry  yaml.Node           `yaml:"telemetry"`
	} `yaml:"service"`
}

func loadCollectorConfig(t *testing.T) collectorCfg {
	t.Helper()
	var c collectorCfg
	readYAML(t, collectorConfig, &c)
	return c
}

func (c collectorCfg) section(kind string) map[string]yaml.Node {
	switch kind {
	case "extensions":
		return c.Extensions
	case "receivers":
		return c.Receivers
	case "processors":
		return c.Processors
	case "exporters":
		return c.Exporters
	}
	return nil
}

// component decodes the configuration of component id of the given kind.
func (c collectorCfg) component(t *testing.T, kind, id string, v any) {
	t.Helper()
	n, ok := c.section(kind)[id]
	if !ok {
		t.Fatalf("collector config: no %s %q", kind, id)
	}
	if err := n.Decode(v); err != nil {
		t.Fatalf("collector config: %s %q: %v", kind, id, err)
	}
}

func (c collectorCfg) receiverEndpoint(t *testing.T, id, protocol string) string {
	t.Helper()
	var r struct {
		Protocols map[string]struct {
			Endpoint string `yaml:"endpoint"`
		} `yaml:"protocols"`
	}
	c.component(t, "receivers", id, &r)
	p, ok := r.Protocols[protocol]
	if !ok {
		t.Fatalf("receiver %s has no %s protocol", id, protocol)
	}
	return p.Endpoint
}

// TestCollectorConfigStructure: the pipelines only name components the
// config defines, every defined component is used, and there is a traces
// and a metrics pipeline.
func TestCollectorConfigStructure(t *testing.T) {
	c := loadCollectorConfig(t)
	used := map[string]bool{}
	ref := func(kind, pl, id string) {
		key := kind + "/" + id
		used[key] = true
		if _, ok := c.section(kind)[id]; !ok {
			if _, isConn := c.Connectors[id]; !isConn || kind == "processors" {
				t.Errorf("pipeline %s names %s %q, which is not defined", pl, kind, id)
			}
		}
	}
	for _, want := range []string{"traces", "metrics"} {
		if _, ok := c.Service.Pipelines[want]; !ok {
			t.Errorf("no %s pipeline", want)
		}
	}
	for name, pl := range c.Service.Pipelines {
		if len(pl.Receivers) == 0 || len(pl.Exporters) == 0 {
			t.Errorf("pipeline %s needs receivers and exporters", name)
		}
		for _, id := range pl.Receivers {
			ref("receivers", name, id)
		}
		for _, id := range pl.Processors {
			ref("processors", name, id)
		}
		for _, id := range pl.Exporters {
			ref("exporters", name, id)
		}
		// memory_limiter belongs first, so it can refuse data before
		// anything else buffers it.
		if i := slices.Index(pl.Processors, "memory_limiter"); i > 0 {
			t.Errorf("pipeline %s: memory_limiter should be the first processor", name)
		}
	}
	for _, id := range c.Service.Extensions {
		used["extensions/"+id] = true
		if _, ok := c.Extensions[id]; !ok {
			t.Errorf("service.extensions names %q, which is not defined", id)
		}
	}
	for _, kind := range []string{"extensions", "receivers", "processors", "exporters"} {
		for id := range c.section(kind) {
			if !used[kind+"/"+id] {
				t.Errorf("%s %q is defined but unused", kind, id)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Prometheus and Grafana files.

type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		HonorLabels   bool   `yaml:"honor_labels"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func loadPrometheusConfig(t *testing.T) promConfig {
	t.Helper()
	var c promConfig
	readYAML(t, prometheusConfig, &c)
	return c
}

type datasourceConfig struct {
	Name      string `yaml:"name"`
	Type      string `yaml:"type"`
	UID       string `yaml:"uid"`
	Access    string `yaml:"access"`
	URL       string `yaml:"url"`
	IsDefault bool   `yaml:"isDefault"`
	Editable  bool   `yaml:"editable"`
	JSONData  struct {
		TimeInterval                string `yaml:"timeInterval"`
		ExemplarTraceIDDestinations []struct {
			Name            string `yaml:"name"`
			DatasourceUID   string `yaml:"datasourceUid"`
			URLDisplayLabel string `yaml:"urlDisplayLabel"`
		} `yaml:"exemplarTraceIdDestinations"`
	} `yaml:"jsonData"`
}

type datasourcesCfg struct {
	APIVersion  int                `yaml:"apiVersion"`
	Datasources []datasourceConfig `yaml:"datasources"`
}

func loadDatasources(t *testing.T) datasourcesCfg {
	t.Helper()
	var c datasourcesCfg
	readYAML(t, datasourcesFile, &c)
	if c.APIVersion != 1 {
		t.Errorf("%s: apiVersion %d, want 1", datasourcesFile, c.APIVersion)
	}
	return c
}

// TestGrafanaTimeInterval: Grafana's $__rate_interval assumes the scrape
// interval the datasource declares; it must be Prometheus' real one.
func TestGrafanaTimeInterval(t *testing.T) {
	pc := loadPrometheusConfig(t)
	for _, d := range loadDatasources(t).Datasources {
		if d.Type == "prometheus" && d.JSONData.TimeInterval != pc.Global.ScrapeInterval {
			t.Errorf("datasource timeInterval %q, Prometheus scrape_interval %q", d.JSONData.TimeInterval, pc.Global.ScrapeInterval)
		}
	}
}
