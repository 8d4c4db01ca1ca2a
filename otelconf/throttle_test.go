package otelconf

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type throttlingService struct {
	coltracepb.UnimplementedTraceServiceServer
}

func (throttlingService) Export(context.Context, *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	return nil, status.Error(codes.ResourceExhausted, "rate limit exceeded")
}

// TestThrottledBackend: a backend that answers every export "busy, retry
// later" — gRPC RESOURCE_EXHAUSTED, HTTP 429 with Retry-After — costs the
// spans, counted, and is named as throttling. Before, the gRPC answer was
// read as a message too large (whose hint, smaller batches, means more
// requests to a rate limit) and the HTTP one as a backend that never
// answered.
func TestThrottledBackend(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(proto, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ep := "http://" + ln.Addr().String()
			if proto == "grpc" {
				gs := grpc.NewServer()
				coltracepb.RegisterTraceServiceServer(gs, throttlingService{})
				done := make(chan struct{})
				go func() { defer close(done); _ = gs.Serve(ln) }()
				t.Cleanup(func() { gs.Stop(); <-done })
			} else {
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Retry-After", "1")
					http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
				}))
				srv.Listener.Close()
				srv.Listener = ln
				srv.Start()
				t.Cleanup(srv.Close)
			}
			cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", ep, "OTEL_EXPORTER_OTLP_PROTOCOL", proto, "OTEL_METRICS_EXPORTER", "none",
				"OTEL_BSP_EXPORT_TIMEOUT", "2000")
			_ = captureErrors(t)
			p := setup(t, Config{})
			recordOne(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			st := p.Status().Traces
			var xe *ExportError
			if st.Produced != int64(treeSpans) || st.Dropped != int64(treeSpans) || !errors.As(st.Err, &xe) || xe.Cause != CauseThrottled {
				t.Errorf("produced %d dropped %d, err %v; want every span dropped, cause throttled", st.Produced, st.Dropped, st.Err)
			}
		})
	}
}
