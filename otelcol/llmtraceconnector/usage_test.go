package llmtraceconnector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// A frontend that sees only the response (llmtrace proxy, the middleware
// in front of a remote server) learns the cached prompt tokens from the
// response's usage: the root carries gen_ai.usage.cache_read.input_tokens,
// but they are not prefix-cache queries or hits of SPEC §4 (the cache may
// be another server's), and the tracker counts none. The connector counted
// every such request's prompt as prefix-cache queries and its usage's
// cached tokens as hits, so the fleet's prefix-cache hit rate differed
// from the tracker's for the same requests.
func TestConnectorUsageCachedTokensAreNotPrefixCacheHits(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	res := resource.NewSchemaless(attribute.String("service.name", "proxy"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(spans.IDGenerator()), sdktrace.WithResource(res))
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tp),
		otelstats.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		at := t0.Add(time.Duration(i) * time.Second)
		ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
		q, err := tr.Arrive(context.Background(), fmt.Sprintf("p-%d", i), otelstats.Arrival{Time: ms(0), Model: "llama-3-8b", Operation: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(q.InputProcessed(ms(1), 100, nil))
		for j := range 3 {
			must(q.Detokenized(ms(50+10*j), 1, 0))
		}
		must(q.CachedTokens(40))
		must(q.Finish(ms(90), "stop"))
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want, _ := fromSDK(rm)
	got, _ := fromPdata(runConnector(t, createDefaultConfig().(*Config), spantest.FromSDK(rec.Ended())))
	for _, name := range []string{attributes.MetricPrefixCacheQuery, attributes.MetricPrefixCacheHits, attributes.MetricPromptTokens} {
		var g, w int64
		for k, p := range got {
			if strings.HasPrefix(k, name+"{") {
				g += p.value
			}
		}
		for k, p := range want {
			if strings.HasPrefix(k, name+"{") {
				w += p.value
			}
		}
		if g != w {
			t.Errorf("%s: the connector counts %d, the tracker %d", name, g, w)
		}
	}
	if requestsCounted(got) != 4 {
		t.Errorf("%d requests counted, want 4", requestsCounted(got))
	}
}
