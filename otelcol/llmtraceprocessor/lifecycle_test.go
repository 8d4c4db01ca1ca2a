package llmtraceprocessor

// The checks mdatagen's generated_component_test.go runs on every contrib
// component (factory type, config struct, lifecycle, consuming after
// Start), plus the config's validation and strict unmarshal as the
// collector applies them when it loads a configuration.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pipeline"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
)

func TestComponentFactoryType(t *testing.T) {
	spantest.CheckType(t, NewFactory().Type(), "llmtrace")
}

func TestComponentConfigStruct(t *testing.T) {
	if err := componenttest.CheckConfigStruct(NewFactory().CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
}

func TestFactoryStability(t *testing.T) {
	f := NewFactory()
	for _, tc := range []struct {
		signal string
		got    component.StabilityLevel
		want   component.StabilityLevel
	}{
		{"traces", f.TracesStability(), component.StabilityLevelAlpha},
		{"metrics", f.MetricsStability(), component.StabilityLevelUndefined},
		{"logs", f.LogsStability(), component.StabilityLevelUndefined},
	} {
		if tc.got != tc.want {
			t.Errorf("%s stability = %v, want %v", tc.signal, tc.got, tc.want)
		}
	}
}

// A pipeline of another signal gets the collector's standard error.
func TestFactoryUnsupportedSignals(t *testing.T) {
	f := NewFactory()
	cfg := f.CreateDefaultConfig()
	set := processortest.NewNopSettings(Type)
	for _, tc := range []struct {
		name   string
		create func() (component.Component, error)
	}{
		{"metrics", func() (component.Component, error) {
			return f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
		}},
		{"logs", func() (component.Component, error) {
			return f.CreateLogs(context.Background(), set, cfg, consumertest.NewNop())
		}},
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
	newProc := func(t *testing.T, next *consumertest.TracesSink) processor.Traces {
		t.Helper()
		p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(Type), f.CreateDefaultConfig(), next)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	start := func(t *testing.T, p component.Component) {
		t.Helper()
		if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	shutdown := func(t *testing.T, p component.Component) {
		t.Helper()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	}
	vllm := ptrace.NewTraces()
	spantest.VLLM(vllm.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty(), pcommon.TraceID{1}, pcommon.SpanID{1}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"shutdown without start", func(t *testing.T) {
			shutdown(t, newProc(t, new(consumertest.TracesSink)))
		}},
		{"start shutdown", func(t *testing.T) {
			p := newProc(t, new(consumertest.TracesSink))
			start(t, p)
			shutdown(t, p)
		}},
		{"shutdown twice", func(t *testing.T) {
			p := newProc(t, new(consumertest.TracesSink))
			start(t, p)
			shutdown(t, p)
			shutdown(t, p)
		}},
		{"two instances from one factory", func(t *testing.T) {
			for range 2 {
				p := newProc(t, new(consumertest.TracesSink))
				start(t, p)
				shutdown(t, p)
			}
		}},
		{"consume after start", func(t *testing.T) {
			for _, in := range []struct {
				name  string
				td    ptrace.Traces
				spans int // reaching the next consumer
			}{
				{"empty", ptrace.NewTraces(), 0},
				{"one span", spantest.Lifecycle(false), 1},
				{"one span with ids", spantest.Lifecycle(true), 1},
				{"an engine span", vllm, 5}, // expanded into four children
			} {
				sink := new(consumertest.TracesSink)
				p := newProc(t, sink)
				start(t, p)
				if err := p.ConsumeTraces(context.Background(), in.td); err != nil {
					t.Errorf("%s: ConsumeTraces: %v", in.name, err)
				}
				shutdown(t, p)
				if got := sink.SpanCount(); got != in.spans {
					t.Errorf("%s: %d spans reached the next consumer, want %d", in.name, got, in.spans)
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
	if got := cfg.(*Config).Engine; got != "auto" {
		t.Fatalf("default engine %q, want auto", got)
	}
}

// The configuration as the collector loads it: unmarshalled strictly from
// the component's map onto the default config, then validated.
func TestConfigLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		conf    map[string]any
		want    Config
		wantErr string // a substring of the error; "" for none
	}{
		{name: "empty", conf: map[string]any{}, want: Config{Engine: "auto"}},
		{name: "auto", conf: map[string]any{"engine": "auto"}, want: Config{Engine: "auto"}},
		{name: "vllm", conf: map[string]any{"engine": "vllm"}, want: Config{Engine: "vllm"}},
		{name: "vllm-v0", conf: map[string]any{"engine": "vllm-v0"}, want: Config{Engine: "vllm-v0"}},
		{name: "sglang", conf: map[string]any{"engine": "sglang"}, want: Config{Engine: "sglang"}},
		{name: "tensorrt-llm", conf: map[string]any{"engine": "tensorrt-llm"}, want: Config{Engine: "tensorrt-llm"}},
		{name: "unknown engine", conf: map[string]any{"engine": "llamacpp"}, wantErr: `unknown engine "llamacpp"`},
		{name: "llmtrace is never forced", conf: map[string]any{"engine": "llmtrace"}, wantErr: `unknown engine "llmtrace"`},
		{name: "unknown key", conf: map[string]any{"engines": "vllm"}, wantErr: "engines"},
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
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *cfg.(*Config) != tc.want {
				t.Fatalf("config %+v, want %+v", *cfg.(*Config), tc.want)
			}
		})
	}
}

// An invalid config that reaches the factory anyway (a caller that skipped
// Validate) is refused with the same error, never a panic.
func TestFactoryRefusesInvalidConfig(t *testing.T) {
	_, err := NewFactory().CreateTraces(context.Background(), processortest.NewNopSettings(Type), &Config{Engine: "nope"}, consumertest.NewNop())
	if err == nil || !strings.Contains(err.Error(), `unknown engine "nope"`) {
		t.Fatalf("err = %v", err)
	}
}
