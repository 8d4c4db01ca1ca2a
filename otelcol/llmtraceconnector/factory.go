package llmtraceconnector

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
)

// Type is the connector's component type.
var Type = component.MustNewType("llmtrace_metrics")

// NewFactory returns the connector's factory.
func NewFactory() connector.Factory {
	return connector.NewFactory(Type, createDefaultConfig,
		connector.WithTracesToMetrics(createTracesToMetrics, component.StabilityLevelAlpha))
}

func createTracesToMetrics(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics) (connector.Traces, error) {
	c := cfg.(*Config)
	// The collector validates a loaded config first; a program building
	// the connector by hand may not, and a zero flush_interval would panic
	// in Start's goroutine.
	if err := c.Validate(); err != nil {
		return nil, err
	}
	e, err := c.engine()
	if err != nil {
		return nil, err
	}
	mc := newConnector(c, e, next, set.Logger)
	mc.setTelemetry(set.MeterProvider)
	return mc, nil
}
