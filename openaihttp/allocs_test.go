//go:build !race

// The race detector's instrumentation changes what escapes to the heap, so
// allocation budgets hold only without it (scripts/test.sh runs the suite
// both ways).

package openaihttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestHTTPMetricsAllocations holds a request's two HTTP duration
// measurements to no allocation once their attribute sets are cached: they
// run on every proxied request, and httpconv's RecordSet, used before,
// built two record options a measurement.
func TestHTTPMetricsAllocations(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	in, err := newInstruments(mp.Meter(ScopeName))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	n := testing.AllocsPerRun(100, func() {
		in.recordServer(r, "/v1/chat/completions", http.StatusOK, "", 30*time.Millisecond)
		in.recordClient(http.MethodPost, "http", "127.0.0.1", 8000, http.StatusOK, "", 30*time.Millisecond)
	})
	if n != 0 {
		t.Errorf("%.1f allocations per request's HTTP metrics, want 0", n)
	}
}

// TestHeaderCarrierAllocations: the propagators' own fields are read and
// written without canonicalizing a copy of the key.
func TestHeaderCarrierAllocations(t *testing.T) {
	h := http.Header{"Traceparent": {"x"}}
	if n := testing.AllocsPerRun(100, func() {
		_ = headerCarrier(h).Get("traceparent")
		headerCarrier(h).Set("tracestate", "y") // the value's slice
	}); n > 1 {
		t.Errorf("%v allocations", n)
	}
}
