package overhead

import (
	"fmt"
	"strconv"
)

// Family is a kind of configuration.
type Family string

// The families of configurations.
const (
	Baseline Family = "baseline" // no llmtrace at all
	Off      Family = "off"      // OTEL_SDK_DISABLED=true
	Metrics  Family = "metrics"  // metrics only
	Head     Family = "head"     // head sampling, OTEL_TRACES_SAMPLER=traceidratio
	Tail     Family = "tail"     // end-of-request sampling, LLMTRACE_SAMPLING=ratio=…
)

// Config is one way to run the stack.
type Config struct {
	Family Family
	Rate   float64 // the sampling rate, for Head and Tail
}

// Name is the configuration's short name: "head-10%".
func (c Config) Name() string {
	if c.Family == Head || c.Family == Tail {
		return fmt.Sprintf("%s-%s%%", c.Family, strconv.FormatFloat(c.Rate*100, 'f', -1, 64))
	}
	return string(c.Family)
}

// Traced reports whether the configuration exports traces.
func (c Config) Traced() bool { return c.Family == Head || c.Family == Tail }

// Exports reports whether the configuration exports anything.
func (c Config) Exports() bool { return c.Family != Baseline && c.Family != Off }

// Configs are the study's configurations, in the order a round runs them.
func Configs() []Config {
	out := []Config{{Family: Baseline}, {Family: Off}, {Family: Metrics}}
	for _, f := range []Family{Head, Tail} {
		for _, r := range []float64{0.01, 0.1, 1} {
			out = append(out, Config{Family: f, Rate: r})
		}
	}
	return out
}

// Env is the configuration's environment for the traced processes, beside
// the endpoints; service names the process in what it exports.
func (c Config) Env(service string, endpoint string) []string {
	env := []string{
		"OTEL_SERVICE_NAME=" + service,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, // gRPC, the library's default protocol
		// Every 5 s rather than the SDK's 60 s, so that the metric export
		// is paid inside the measurement (pessimistic).
		"OTEL_METRIC_EXPORT_INTERVAL=5000",
	}
	switch c.Family {
	case Off:
		env = append(env, "OTEL_SDK_DISABLED=true")
	case Metrics:
		env = append(env, "OTEL_TRACES_EXPORTER=none")
	case Head:
		env = append(env, "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG="+strconv.FormatFloat(c.Rate, 'f', -1, 64))
	case Tail:
		env = append(env, "LLMTRACE_SAMPLING=ratio="+strconv.FormatFloat(c.Rate, 'f', -1, 64))
	}
	return env
}
