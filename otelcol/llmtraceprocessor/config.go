package llmtraceprocessor

import (
	"fmt"

	"go.opentelemetry.io/collector/component"

	"github.com/llmtrace/llmtrace/reconstruct"
)

// Config is the processor's configuration.
type Config struct {
	// Engine names the mapping applied to every span: "auto" (the default)
	// detects it per span (reconstruct.Detect); vllm, vllm-v0, sglang and
	// tensorrt-llm force one (never on llmtrace's own roots, which are
	// not expanded).
	Engine string `mapstructure:"engine"`
}

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config { return &Config{Engine: "auto"} }

// Validate rejects an unknown engine name.
func (c *Config) Validate() error {
	_, err := c.engine()
	return err
}

// engine returns the forced mapping, or nil for auto.
func (c *Config) engine() (*reconstruct.Engine, error) {
	if c.Engine == "" || c.Engine == "auto" {
		return nil, nil
	}
	e, ok := reconstruct.EngineByName(c.Engine)
	if !ok || e.NoExpand { // llmtrace's mapping is detected, never forced: it expands nothing
		return nil, fmt.Errorf("llmtrace: unknown engine %q (want auto, vllm, vllm-v0, sglang or tensorrt-llm)", c.Engine)
	}
	return &e, nil
}
