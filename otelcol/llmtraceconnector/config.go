package llmtraceconnector

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/llmtrace/llmtrace/reconstruct"
)

// Config is the connector's configuration.
type Config struct {
	// FlushInterval is how often the cumulative metrics are emitted.
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	// Models keep their name on metrics; others become "other". Empty:
	// the first MaxModels distinct names keep theirs.
	Models    []string `mapstructure:"models"`
	MaxModels int      `mapstructure:"max_models"`
	// Adapters keep their name on metrics (llm.lora.adapter); others
	// become "other". Empty: the first MaxModels distinct adapters keep
	// theirs, as for models.
	Adapters []string `mapstructure:"adapters"`
	// MaxSeries bounds the series kept (per instrument family).
	MaxSeries int `mapstructure:"max_series"`
	// ResourceAttributes identify a series' resource.
	ResourceAttributes []string `mapstructure:"resource_attributes"`
	// Engine as the processor's: auto, or a forced mapping.
	Engine string `mapstructure:"engine"`
	// DedupSpans is how many request spans' (trace id, span id) are
	// remembered, the latest ones, so that a span delivered again (an
	// exporter retrying a send that arrived, a queue re-sending) is not
	// counted twice; 24 to 40 bytes each. 0 turns it off.
	DedupSpans int `mapstructure:"dedup_spans"`
}

// minFlushInterval bounds flush_interval from below: a number without a
// unit (flush_interval: 15) decodes as nanoseconds, and would flush the
// whole state to the metrics pipeline in a busy loop.
const minFlushInterval = time.Millisecond

// maxDedupSpans bounds dedup_spans: about 400 MB of memory.
const maxDedupSpans = 10_000_000

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		FlushInterval: 15 * time.Second, MaxModels: 100, MaxSeries: 10000,
		ResourceAttributes: []string{"service.name", "service.namespace", "service.instance.id"},
		Engine:             "auto", DedupSpans: 100_000,
	}
}

// Validate checks the bounds and the engine name.
func (c *Config) Validate() error {
	var errs []error
	if c.FlushInterval < minFlushInterval {
		errs = append(errs, fmt.Errorf("flush_interval must be at least %v, not %v (a number without a unit is nanoseconds: write 15s)", minFlushInterval, c.FlushInterval))
	}
	if c.MaxModels < 0 {
		errs = append(errs, fmt.Errorf("max_models must not be negative, not %d", c.MaxModels))
	}
	if c.MaxSeries <= 0 {
		errs = append(errs, fmt.Errorf("max_series must be positive, not %d", c.MaxSeries))
	}
	if c.DedupSpans < 0 || c.DedupSpans > maxDedupSpans {
		errs = append(errs, fmt.Errorf("dedup_spans must be between 0 (off) and %d, not %d", maxDedupSpans, c.DedupSpans))
	}
	if _, err := c.engine(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c *Config) engine() (*reconstruct.Engine, error) {
	if c.Engine == "" || c.Engine == "auto" {
		return nil, nil
	}
	e, ok := reconstruct.EngineByName(c.Engine)
	if !ok || e.NoExpand { // llmtrace's mapping is detected, never forced
		return nil, fmt.Errorf("llmtrace_metrics: unknown engine %q (want auto, vllm, vllm-v0, sglang or tensorrt-llm)", c.Engine)
	}
	return &e, nil
}
