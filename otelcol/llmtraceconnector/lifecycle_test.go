package llmtraceconnector

// The checks mdatagen's generated_component_test.go runs on every contrib
// connector (factory type, config struct, lifecycle, two instances from
// one factory), plus consuming after Start, the config's validation and
// its strict unmarshal as the collector applies them when it loads a
// configuration.

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pipeline"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

func TestComponentFactoryType(t *testing.T) {
	spantest.CheckType(t, NewFactory().Type(), "llmtrace_metrics")
}

func TestComponentConfigStruct(t *testing.T) {
	if err := componenttest.CheckConfigStruct(NewFactory().CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
}

func TestFactoryStability(t *testing.T) {
	f := NewFactory()
	for _, tc := range []struct {
		pair string
		got  component.StabilityLevel
		want component.StabilityLevel
	}{
		{"traces to metrics", f.TracesToMetricsStability(), component.StabilityLevelAlpha},
		{"traces to traces", f.TracesToTracesStability(), component.StabilityLevelUndefined},
		{"traces to logs", f.TracesToLogsStability(), component.StabilityLevelUndefined},
		{"metrics to metrics", f.MetricsToMetricsStability(), component.StabilityLevelUndefined},
		{"logs to metrics", f.LogsToMetricsStability(), component.StabilityLevelUndefined},
	} {
		if tc.got != tc.want {
			t.Errorf("%s stability = %v, want %v", tc.pair, tc.got, tc.want)
		}
	}
}

// A pipeline pair the connector does not join gets the collector's
// standard error.
func TestFactoryUnsupportedSignals(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig()
	set := connectortest.NewNopSettings(Type)
	ctx := context.Background()
	nop := consumertest.NewNop()
	for _, tc := range []struct {
		name   string
		create func() (component.Component, error)
	}{
		{"traces to traces", func() (component.Component, error) { return f.CreateTracesToTraces(ctx, set, cfg, nop) }},
		{"traces to logs", func() (component.Component, error) { return f.CreateTracesToLogs(ctx, set, cfg, nop) }},
		{"metrics to metrics", func() (component.Component, error) { return f.CreateMetricsToMetrics(ctx, set, cfg, nop) }},
		{"metrics to traces", func() (component.Component, error) { return f.CreateMetricsToTraces(ctx, set, cfg, nop) }},
		{"metrics to logs", func() (component.Component, error) { return f.CreateMetricsToLogs(ctx, set, cfg, nop) }},
		{"logs to metrics", func() (component.Component, error) { return f.CreateLogsToMetrics(ctx, set, cfg, nop) }},
		{"logs to traces", func() (component.Component, error) { return f.CreateLogsToTraces(ctx, set, cfg, nop) }},
		{"logs to logs", func() (component.Component, error) { return f.CreateLogsToLogs(ctx, set, cfg, nop) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.create()
			if !errors.Is(err, pipeline.ErrSignalNotSupported) {
				t.Fatalf("err = %v, want pipeline.ErrSignalNotSupported", err)
			}
			if c != nil {
				t.Fatalf("got a component with the error: %v", c)
			}
		})
	}
}

func TestComponentLifecycle(t *testing.T) {
	f := NewFactory()
	// The router, as the collector (and mdatagen's test) hands it over.
	router := func(next consumer.Metrics) consumer.Metrics {
		return connector.NewMetricsRouter(map[pipeline.ID]consumer.Metrics{pipeline.NewID(pipeline.SignalMetrics): next})
	}
	newConn := func(t *testing.T, next consumer.Metrics) connector.Traces {
		t.Helper()
		c, err := f.CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(Type), f.CreateDefaultConfig(), router(next))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	start := func(t *testing.T, c component.Component) {
		t.Helper()
		if err := c.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	shutdown := func(t *testing.T, c component.Component) {
		t.Helper()
		if err := c.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	vllm := func() ptrace.Traces {
		td := ptrace.NewTraces()
		spantest.VLLM(td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
		return td
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"shutdown without start", func(t *testing.T) {
			shutdown(t, newConn(t, consumertest.NewNop()))
		}},
		{"start shutdown", func(t *testing.T) {
			c := newConn(t, consumertest.NewNop())
			start(t, c)
			shutdown(t, c)
		}},
		{"shutdown twice", func(t *testing.T) {
			c := newConn(t, consumertest.NewNop())
			start(t, c)
			shutdown(t, c)
			shutdown(t, c)
		}},
		{"start twice", func(t *testing.T) {
			// The second Start is a no-op: one flush goroutine, which
			// Shutdown stops (goleak).
			c := newConn(t, consumertest.NewNop())
			start(t, c)
			start(t, c)
			shutdown(t, c)
		}},
		{"two instances from one factory", func(t *testing.T) {
			for range 2 {
				c := newConn(t, consumertest.NewNop())
				start(t, c)
				shutdown(t, c)
			}
		}},
		{"consume after start", func(t *testing.T) {
			for _, in := range []struct {
				name    string
				td      ptrace.Traces
				metrics bool // the final flush has data points
			}{
				{"empty", ptrace.NewTraces(), false},
				{"one span", spantest.Lifecycle(false), false},
				{"one span with ids", spantest.Lifecycle(true), false},
				{"an engine span", vllm(), true},
			} {
				sink := new(consumertest.MetricsSink)
				c := newConn(t, sink)
				start(t, c)
				// The connector does not mutate: the fan-out hands it
				// read-only data, as mdatagen's test does.
				if c.Capabilities().MutatesData {
					t.Fatal("the connector declares it mutates data")
				}
				in.td.MarkReadOnly()
				if err := c.ConsumeTraces(context.Background(), in.td); err != nil {
					t.Errorf("%s: ConsumeTraces: %v", in.name, err)
				}
				shutdown(t, c)
				if got := sink.DataPointCount() > 0; got != in.metrics {
					t.Errorf("%s: data points emitted %v, want %v", in.name, got, in.metrics)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			tc.run(t)
		})
	}
}

func TestDefaultConfigValid(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig()
	if err := confmap.Validate(cfg); err != nil {
		t.Fatalf("default config: %v", err)
	}
}

// The configuration as the collector loads it: unmarshalled strictly from
// the component's map onto the default config, then validated.
func TestConfigLoad(t *testing.T) {
	def := func(edit func(*Config)) Config {
		c := *createDefaultConfig().(*Config)
		edit(&c)
		return c
	}
	for _, tc := range []struct {
		name    string
		conf    map[string]any
		want    Config
		wantErr string // a substring of the error; "" for none
		notErr  string // a field the error must not blame
	}{
		{name: "empty", conf: map[string]any{}, want: def(func(*Config) {})},
		{name: "all keys", conf: map[string]any{
			"flush_interval": "30s", "models": []any{"llama-3-8b"}, "max_models": 5, "adapters": []any{"sql-lora"},
			"max_series": 100, "resource_attributes": []any{"service.name"}, "engine": "sglang", "dedup_spans": 0,
		}, want: Config{FlushInterval: 30 * time.Second, Models: []string{"llama-3-8b"}, MaxModels: 5, Adapters: []string{"sql-lora"},
			MaxSeries: 100, ResourceAttributes: []string{"service.name"}, Engine: "sglang", DedupSpans: 0}},
		// A list replaces the default, never merges into it.
		{name: "resource_attributes replaced", conf: map[string]any{"resource_attributes": []any{"k8s.pod.name"}},
			want: def(func(c *Config) { c.ResourceAttributes = []string{"k8s.pod.name"} })},
		{name: "max_models 0", conf: map[string]any{"max_models": 0}, want: def(func(c *Config) { c.MaxModels = 0 })},
		{name: "dedup_spans at the bound", conf: map[string]any{"dedup_spans": maxDedupSpans},
			want: def(func(c *Config) { c.DedupSpans = maxDedupSpans })},

		{name: "unknown key", conf: map[string]any{"flush_intervall": "30s"}, wantErr: "flush_intervall"},
		{name: "flush_interval zero", conf: map[string]any{"flush_interval": "0s"}, wantErr: "flush_interval must be at least 1ms, not 0s"},
		{name: "flush_interval negative", conf: map[string]any{"flush_interval": "-1s"}, wantErr: "flush_interval must be at least 1ms, not -1s"},
		{name: "flush_interval not a duration", conf: map[string]any{"flush_interval": "soon"}, wantErr: "flush_interval"},
		// A number without a unit decodes as nanoseconds: "15" meant 15s
		// and would flush every 15ns, a busy loop sending to the metrics
		// pipeline.
		{name: "flush_interval without a unit", conf: map[string]any{"flush_interval": 15}, wantErr: "flush_interval must be at least 1ms, not 15ns"},
		{name: "flush_interval under 1ms", conf: map[string]any{"flush_interval": "999us"}, wantErr: "flush_interval must be at least 1ms"},
		{name: "flush_interval 1ms", conf: map[string]any{"flush_interval": "1ms"}, want: def(func(c *Config) { c.FlushInterval = time.Millisecond })},
		{name: "max_models negative", conf: map[string]any{"max_models": -1}, wantErr: "max_models must not be negative, not -1", notErr: "max_series"},
		{name: "max_series zero", conf: map[string]any{"max_series": 0}, wantErr: "max_series must be positive, not 0", notErr: "max_models"},
		{name: "max_series negative", conf: map[string]any{"max_series": -5}, wantErr: "max_series must be positive, not -5", notErr: "max_models"},
		{name: "dedup_spans negative", conf: map[string]any{"dedup_spans": -1}, wantErr: "dedup_spans must be between 0"},
		{name: "dedup_spans too large", conf: map[string]any{"dedup_spans": maxDedupSpans + 1}, wantErr: "dedup_spans must be between 0"},
		{name: "unknown engine", conf: map[string]any{"engine": "llamacpp"}, wantErr: `unknown engine "llamacpp"`},
		{name: "llmtrace is never forced", conf: map[string]any{"engine": "llmtrace"}, wantErr: `unknown engine "llmtrace"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			err := confmap.NewFromStringMap(tc.conf).Unmarshal(cfg)
			if err == nil {
				err = confmap.Validate(cfg)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				if tc.notErr != "" && strings.Contains(err.Error(), tc.notErr) {
					t.Fatalf("err = %v blames %s, which is valid", err, tc.notErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := *cfg.(*Config); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("config %+v, want %+v", got, tc.want)
			}
		})
	}
}

// An invalid config that reaches the factory anyway (a program building
// the connector without the collector's Validate, a zero Config) is
// refused with Validate's error, never a connector whose Start panics in
// its flush goroutine (time.NewTicker(0)) and takes the process down.
func TestFactoryRefusesInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     *Config
		wantErr string
	}{
		{"unknown engine", &Config{FlushInterval: time.Second, MaxSeries: 1, Engine: "nope"}, `unknown engine "nope"`},
		{"zero config", &Config{}, "flush_interval must be at least 1ms"},
		{"negative dedup_spans", &Config{FlushInterval: time.Second, MaxSeries: 1, DedupSpans: -1}, "dedup_spans"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewFactory().CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(Type), tc.cfg, consumertest.NewNop())
			if err == nil {
				// Before the fix: Start's goroutine panics here.
				_ = c.Start(context.Background(), componenttest.NewNopHost())
				_ = c.Shutdown(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}
