package otelconf

import (
	"os"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// headSampler is the head sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name, read as the Go SDK reads them, for the
// tracker to ask at each request's arrival (otelstats.WithHeadSampler):
// nil when they leave the SDK's default, which keeps every trace the
// tracker's own rules keep. Where the SDK logs a value it cannot use and
// samples everything instead, this is a ConfigError naming the variable:
// a mistyped ratio should not quietly trace every request. With
// OTEL_SDK_DISABLED=true (disabled) the variables are not read, as the
// endpoints are not: the SDK is off whatever they say, and a sampler only
// other services' SDKs have (jaeger_remote) must not fail the start.
func headSampler(disabled bool) (sdktrace.Sampler, error) {
	if disabled {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	switch name {
	case "", "always_on", "parentbased_always_on":
		return nil, nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		ratio := 1.0
		if arg != "" {
			var err error
			if ratio, err = strconv.ParseFloat(arg, 64); err != nil || !(ratio >= 0 && ratio <= 1) { // NaN too
				return nil, &ConfigError{Name: "OTEL_TRACES_SAMPLER_ARG", Value: arg,
					Reason: "want a ratio from 0 to 1 for " + name}
			}
		}
		s := sdktrace.TraceIDRatioBased(ratio)
		if name == "parentbased_traceidratio" {
			s = sdktrace.ParentBased(s)
		}
		return s, nil
	}
	return nil, &ConfigError{Name: "OTEL_TRACES_SAMPLER", Value: name,
		Reason: "want always_on, always_off, traceidratio or their parentbased_ forms (the samplers the Go SDK reads)"}
}
