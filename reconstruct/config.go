package reconstruct

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a SpanProcessor.
type Option interface{ apply(*config) }

type config struct {
	engine *Engine // nil: Detect per span
	mp     metric.MeterProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func newConfig(opts []Option) config {
	c := config{mp: otel.GetMeterProvider()}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// WithEngine applies e to every span instead of detecting the engine per
// span (Detect), except llmtrace's own spans, which are never expanded
// (Resolve).
func WithEngine(e Engine) Option {
	return optionFunc(func(c *config) { c.engine = &e })
}

// WithMeterProvider sets where the llm.reconstruct.clamped counter is
// recorded; the default is the global MeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	})
}
