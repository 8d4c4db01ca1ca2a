package otelstats

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/internal/textcap"
)

// Defaults of the Tracker's bounds.
const (
	DefaultFrontendGrace = 2 * time.Second
	DefaultHoldWindow    = 2 * time.Second
	DefaultRequestTTL    = 10 * time.Minute
	DefaultMaxInFlight   = 1 << 20
	DefaultMaxHeld       = 1 << 16
	DefaultMaxModels     = 64
	DefaultStatsInterval = 10 * time.Second
	// DefaultMaxClockAhead is how far ahead of a live tracker's own clock an
	// update's time may be. Hosts kept by NTP agree within milliseconds; a
	// minute leaves room for a slow, loaded producer and still stops a
	// skewed one.
	DefaultMaxClockAhead = time.Minute
	// DefaultProviderName is gen_ai.provider.name when WithProviderName is
	// not given. The conventions' well-known values name hosted APIs
	// (openai, aws.bedrock, …); a self-hosted server names itself.
	DefaultProviderName = "llmtrace"
)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	sp       sdktrace.SpanProcessor
	res      *resource.Resource
	noTraces bool

	logger        *slog.Logger
	statsInterval time.Duration

	frontendGrace time.Duration
	holdWindow    time.Duration
	requestTTL    time.Duration
	maxInFlight   int
	maxHeld       int

	models    []string
	adapters  []string
	maxModels int

	tokenLatencies bool
	onFinish       []func(*RequestStats)
	onReject       func(*RejectError)
	autoSweep      time.Duration
	maxAhead       time.Duration
	provider       string
	pdRole         string

	sampling    *SamplingPolicy
	head        sdktrace.Sampler
	trustParent bool
	detail      Detail
	agg         *Aggregator
	content     *ContentCapture
}

func newConfig(opts []Option) config {
	c := config{
		statsInterval: DefaultStatsInterval,
		frontendGrace: DefaultFrontendGrace,
		holdWindow:    DefaultHoldWindow,
		requestTTL:    DefaultRequestTTL,
		maxInFlight:   DefaultMaxInFlight,
		maxHeld:       DefaultMaxHeld,
		maxModels:     DefaultMaxModels,
		maxAhead:      DefaultMaxClockAhead,
		provider:      DefaultProviderName,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	return c
}

// Option configures a Tracker.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the TracerProvider the span trees go through. The
// default is the global one (otel.GetTracerProvider). Give it
// sdktrace.WithIDGenerator(spans.IDGenerator()) so root spans keep the ids
// handed out at arrival.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithSpanProcessor hands each kept request's finished span tree straight
// to sp — typically the same batch processor the TracerProvider exports
// through — instead of starting and ending its spans through the
// TracerProvider's Tracer. A request's spans are all known when it
// finishes, so nothing is lost by skipping the live-span machinery, and it
// is most of what a kept trace costs (see BENCHMARKS.md): the nine spans of
// a preempted request take four allocations instead of about eighty.
//
// What the Tracer would add and this path does not: the TracerProvider's
// sampler (the tracker's own samplers decide: WithHeadSampler at arrival,
// WithSampling at the end), its span limits (the tracker's trees
// are bounded anyway) and the processors' OnStart (the spans were never
// live). The spans report the resource set by WithResource. With sp nil
// (the default) trees go through the TracerProvider.
func WithSpanProcessor(sp sdktrace.SpanProcessor) Option {
	return optionFunc(func(c *config) { c.sp = sp })
}

// WithTraces(false) has the tracker build no spans: for a process whose
// traces go nowhere (otelconf's TrackerOptions sets it when no exporter or
// span processor takes them: OTEL_TRACES_EXPORTER=none, OTEL_SDK_DISABLED),
// where building each kept request's tree only to drop it would cost more
// than sampling 1% of them does. Every request is then reported not
// sampled, with the reason NotTraced, and its metrics carry no exemplars;
// everything else (stats, metrics, hooks) is as with traces. The default is
// true.
func WithTraces(on bool) Option {
	return optionFunc(func(c *config) { c.noTraces = !on })
}

// WithResource sets the resource of the spans WithSpanProcessor exports —
// give the TracerProvider's, so both paths report the same service (default:
// resource.Default(), which reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES).
func WithResource(res *resource.Resource) Option {
	return optionFunc(func(c *config) { c.res = res })
}

// WithMeterProvider sets the MeterProvider the metrics go through. The
// default is the global one (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithStatsLog logs a vLLM-style stats line (throughput, running, waiting,
// preemptions, KV-cache usage, prefix-cache hit rate) to logger at most once
// per interval of recorded time, whether updates come per request, in
// Steps or with scheduler stats; the first interval starts when the
// tracker first checks it and holds only what was recorded after. Without
// it nothing is logged.
func WithStatsLog(logger *slog.Logger, interval time.Duration) Option {
	return optionFunc(func(c *config) {
		c.logger = logger
		if interval > 0 {
			c.statsInterval = interval
		}
	})
}

// WithFrontendGrace bounds how long a request that one side finished waits
// for the other side's FINISHED (default 2 s of recorded time).
func WithFrontendGrace(d time.Duration) Option {
	return optionFunc(func(c *config) { c.frontendGrace = max(d, 0) })
}

// WithHoldWindow bounds how long an update that arrives before its request's
// ARRIVED is held before it is rejected as unknown (default 2 s).
func WithHoldWindow(d time.Duration) Option {
	return optionFunc(func(c *config) { c.holdWindow = max(d, 0) })
}

// WithRequestTTL ends a request as "abandoned" when it has received no update
// for d (default 10 min; 0 disables).
func WithRequestTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.requestTTL = max(d, 0) })
}

// WithMaxInFlight caps the requests in flight; at the cap an ARRIVED evicts
// the oldest request of its shard, which finishes as "evicted".
func WithMaxInFlight(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxInFlight = n
		}
	})
}

// WithMaxHeld caps the updates held while waiting for their ARRIVED.
func WithMaxHeld(n int) Option {
	return optionFunc(func(c *config) { c.maxHeld = max(n, 0) })
}

// WithModels sets the models that keep their name on metrics; any other
// model is recorded as "other". Without it, the first 64 distinct models
// that served a request without failing keep
// their names. Spans always carry the real model name.
func WithModels(models ...string) Option {
	return optionFunc(func(c *config) { c.models = append([]string(nil), models...) })
}

// WithTokenLatencies keeps every inter-token gap in
// RequestStats.OutputTokenLatencies. It costs memory proportional to the
// output length, so it is off by default; the ITL histogram is recorded
// either way.
func WithTokenLatencies(on bool) Option {
	return optionFunc(func(c *config) { c.tokenLatencies = on })
}

// WithOnFinish calls f with each finished request's stats, on the goroutine
// that finished it. f must not retain the pointer.
func WithOnFinish(f func(*RequestStats)) Option {
	return optionFunc(func(c *config) { c.onFinish = append(c.onFinish, f) })
}

// WithOnReject calls f for each rejection that could not be returned to a
// caller: an update held for its ARRIVED that expired, or that broke a rule
// when its ARRIVED came. Rejections returned by Record, Step and the Request
// methods are not passed to f.
func WithOnReject(f func(*RejectError)) Option {
	return optionFunc(func(c *config) { c.onReject = f })
}

// WithSampling sets the end-of-request sampling policy; nil, the default,
// keeps every trace. ParseSamplingPolicy reads the policy's text form
// (otelconf reads it from LLMTRACE_SAMPLING).
func WithSampling(p *SamplingPolicy) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			cp := *p
			c.sampling = &cp
		} else {
			c.sampling = nil
		}
	})
}

// WithTrustParentSampling lets an incoming parent's sampled flag decide
// whether a request's trace is kept. Off by default (SPEC §6): an untrusted
// caller's traceparent still makes the root span its child, but cannot force
// or suppress sampling.
func WithTrustParentSampling(on bool) Option {
	return optionFunc(func(c *config) { c.trustParent = on })
}

// WithDetail sets the default detail level of traces (see Detail). Without
// it the level is DetailTree (otelconf reads LLMTRACE_DETAIL).
func WithDetail(d Detail) Option {
	return optionFunc(func(c *config) { c.detail = d })
}

// WithAggregator makes the tracker aggregate its latency histograms in agg
// (the fast path; see Aggregator) instead of recording them through the
// MeterProvider.
func WithAggregator(agg *Aggregator) Option {
	return optionFunc(func(c *config) { c.agg = agg })
}

// WithAutoSweep makes the tracker live: a goroutine calls Sweep(time.Now())
// every interval, so waits, holds and TTLs expire on the tracker's own
// clock even when no update arrives, and times taken from input never move
// that clock — one producer with a skewed clock cannot end other producers'
// requests. An update more than WithMaxClockAhead ahead of the clock is
// rejected as bad_timestamp. Use it when updates carry real time (servers,
// collectors); a simulation or a replayed log, without it, expires on its
// own recorded times instead. Shutdown stops the goroutine.
func WithAutoSweep(interval time.Duration) Option {
	return optionFunc(func(c *config) { c.autoSweep = max(interval, 0) })
}

// WithMaxClockAhead bounds how far ahead of a live tracker's clock
// (WithAutoSweep) an update's time may be before it is rejected as
// bad_timestamp (default DefaultMaxClockAhead). Without WithAutoSweep,
// times are the log's own and no bound applies.
func WithMaxClockAhead(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.maxAhead = d
		}
	})
}

// WithProviderName sets gen_ai.provider.name, which the GenAI conventions
// require on the root span and the gen_ai.server.* metrics: the serving
// stack as its clients know it, e.g. "vllm" behind a proxy, or a
// well-known value such as "openai" for an OpenAI-compatible gateway to
// OpenAI. Default DefaultProviderName. It is cut at MaxNameLength.
func WithProviderName(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.provider = textcap.Cut(name, MaxNameLength)
		}
	})
}

// WithAdapters sets the LoRA adapters that keep their name on metrics
// (llm.lora.adapter); any other is recorded as "other". Without it, the
// first 64 distinct adapters that served a request without failing keep
// their names, as for models (WithModels). Spans always carry the real
// adapter name.
func WithAdapters(adapters ...string) Option {
	return optionFunc(func(c *config) { c.adapters = append([]string(nil), adapters...) })
}

// WithPDRole says the tracker records one instance of disaggregated serving
// (PDRolePrefill or PDRoleDecode, SPEC §7): its scheduler gauges (running,
// waiting, KV-cache usage) and instance counters (the prefix-cache counts
// an engine reports, rejected updates, truncated attributes, evictions,
// clamped spans) carry llm.pd.role, so a prefill and a decode instance on
// one MeterProvider keep apart, and its arrivals take the role
// unless Arrival.PDRole or an ARRIVED's PDRole names one. Any other value
// is ignored.
func WithPDRole(role string) Option {
	return optionFunc(func(c *config) {
		if role == PDRolePrefill || role == PDRoleDecode {
			c.pdRole = role
		}
	})
}
