package otelconf

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// partialService answers every export with OTLP's partial success:
// rejected of its spans refused (the others taken), and msg.
type partialService struct {
	coltracepb.UnimplementedTraceServiceServer
	rejected int64
	msg      string
	got      *atomic.Int64
}

func (s partialService) answer(m *coltracepb.ExportTraceServiceRequest) *coltracepb.ExportTraceServiceResponse {
	n := int64(0)
	for _, rs := range m.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += int64(len(ss.Spans))
		}
	}
	s.got.Add(n)
	return &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{
		RejectedSpans: min(s.rejected, n), ErrorMessage: s.msg}}
}

func (s partialService) Export(_ context.Context, m *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	return s.answer(m), nil
}

func startPartial(t *testing.T, httpProto bool, s partialService) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if httpProto {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			var m coltracepb.ExportTraceServiceRequest
			if readProto(w, req, &m) {
				writeProto(w, s.answer(&m))
			}
		}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return "http://" + ln.Addr().String() + "/v1/traces"
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return "http://" + ln.Addr().String()
}

// TestPartialSuccess: a backend answering OTLP's partial success has taken
// every span it did not reject (the specification: the request succeeded,
// and it must not be retried). Only the rejected spans are dropped; a
// partial success that rejects nothing (a warning) drops nothing and is no
// failed export. Before, the exporter's error for it made the processor
// count the whole batch as dropped and Status report a failure.
func TestPartialSuccess(t *testing.T) {
	const spans = 8 // one batch
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, tc := range []struct {
			name     string
			rejected int64
			msg      string
		}{
			{"rejects two", 2, "2 spans too old"},
			{"rejects two without a message", 2, ""},
			{"a warning only", 0, "attributes truncated"},
			{"rejects all", spans, "quota"},
			{"rejects more than sent", 1 << 40, "confused"},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				var got atomic.Int64
				ep := startPartial(t, proto != "grpc", partialService{rejected: tc.rejected, msg: tc.msg, got: &got})
				cleanEnv(t, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ep, "OTEL_EXPORTER_OTLP_PROTOCOL", proto,
					"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1024", "OTEL_BSP_SCHEDULE_DELAY", "60000")
				errs := captureErrors(t)
				p := setup(t, Config{})
				tr := p.TracerProvider.Tracer("t")
				for range spans {
					_, s := tr.Start(context.Background(), "s", trace.WithNewRoot())
					s.End()
				}
				if err := p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got.Load() != spans {
					t.Fatalf("receiver got %d spans, want %d", got.Load(), spans)
				}
				rejected := min(tc.rejected, spans)
				st := p.Status()
				if st.Traces.Produced != spans || st.Traces.Dropped != rejected || st.Traces.Exported != spans-rejected {
					t.Errorf("produced %d exported %d dropped %d; want %d, %d, %d",
						st.Traces.Produced, st.Traces.Exported, st.Traces.Dropped, spans, spans-rejected, rejected)
				}
				if st.Traces.Exports != 1 || st.Traces.Failures != 0 {
					t.Errorf("%d exports, %d failures; want 1, 0 (a partial success is a success)", st.Traces.Exports, st.Traces.Failures)
				}
				if tc.rejected > 0 && len(errs.all()) == 0 {
					t.Error("rejected spans were not reported")
				}
			})
		}
	}
}
