package otelconf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestResourceInvalidUTF8: OTEL_RESOURCE_ATTRIBUTES is percent-decoded, so
// k=a%FFb holds the byte 0xFF, and OTEL_SERVICE_NAME is taken as it comes;
// protobuf strings are UTF-8. Setup writes such bytes as U+FFFD (as the
// span encoder does) and says so, naming the keys, so metrics — and spans
// through the SDK's own exporter (OTEL_GO_X_OBSERVABILITY=true) — still
// arrive. Before, every metric export failed on "string field contains
// invalid UTF-8" for the life of the process.
func TestResourceInvalidUTF8(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, sdkExporter := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sdk exporter %v", proto, sdkExporter), func(t *testing.T) {
				rec := startReceiver(t, receiverOpts{http: proto != "grpc", traces: true, metrics: true})
				cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", proto,
					"OTEL_RESOURCE_ATTRIBUTES", "k=a%FFb,ok=fine", "OTEL_SERVICE_NAME", "svc\xfe")
				t.Setenv("OTEL_GO_X_OBSERVABILITY", fmt.Sprint(sdkExporter))
				errs := captureErrors(t)
				p := setup(t, Config{})
				recordOne(t, p)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := p.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				st := p.Status()
				if rec.spanCount() != treeSpans || st.Metrics.Failures != 0 || rec.metric("llm.server.requests") == nil {
					t.Fatalf("%d spans arrived, metrics %s", rec.spanCount(), st)
				}
				for _, r := range rec.resources() {
					if r["service.name"] != "svc\uFFFD" || r["k"] != "a\uFFFDb" || r["ok"] != "fine" {
						t.Errorf("resource %q", r)
					}
				}
				if all := fmt.Sprint(errs.all()); !strings.Contains(all, `"k", "service.name"`) || !strings.Contains(all, "OTEL_RESOURCE_ATTRIBUTES") {
					t.Errorf("no warning naming the keys and the variable: %s", all)
				}
			})
		}
	}
}
