package otelconf

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
)

// partialMetrics answers every metric export with OTLP's partial success.
type partialMetrics struct {
	colmetricpb.UnimplementedMetricsServiceServer
	rejected int64
	msg      string
}

func (s partialMetrics) answer() *colmetricpb.ExportMetricsServiceResponse {
	return &colmetricpb.ExportMetricsServiceResponse{PartialSuccess: &colmetricpb.ExportMetricsPartialSuccess{
		RejectedDataPoints: s.rejected, ErrorMessage: s.msg}}
}

func (s partialMetrics) Export(context.Context, *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	return s.answer(), nil
}

// TestMetricsPartialSuccess: a backend answering a metric export with
// OTLP's partial success took it (the specification: a success, never
// retried); the export counts as done, and the rejection, or the warning,
// is reported. Before, every such export counted as a failure: Status
// said "0 of N exports", "last failure: unknown".
func TestMetricsPartialSuccess(t *testing.T) {
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, tc := range []struct {
			rejected int64
			msg      string
		}{{3, "too old"}, {0, "unit normalised"}} {
			t.Run(fmt.Sprintf("%s/rejected=%d", proto, tc.rejected), func(t *testing.T) {
				s := partialMetrics{rejected: tc.rejected, msg: tc.msg}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if proto == "grpc" {
					gs := grpc.NewServer()
					colmetricpb.RegisterMetricsServiceServer(gs, s)
					done := make(chan struct{})
					go func() { defer close(done); _ = gs.Serve(ln) }()
					t.Cleanup(func() { gs.Stop(); <-done })
				} else {
					srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
						var m colmetricpb.ExportMetricsServiceRequest
						if readProto(w, req, &m) {
							writeProto(w, s.answer())
						}
					}))
					srv.Listener.Close()
					srv.Listener = ln
					srv.Start()
					t.Cleanup(srv.Close)
				}
				cleanEnv(t, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://"+ln.Addr().String()+map[bool]string{true: "", false: "/v1/metrics"}[proto == "grpc"],
					"OTEL_EXPORTER_OTLP_PROTOCOL", proto, "OTEL_TRACES_EXPORTER", "none")
				errs := captureErrors(t)
				p := setup(t, Config{})
				recordOne(t, p)
				if err := p.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				st := p.Status().Metrics
				if st.Exports == 0 || st.Failures != 0 || st.Err != nil {
					t.Errorf("%d exports, %d failures, err %v; want no failure", st.Exports, st.Failures, st.Err)
				}
				if all := fmt.Sprint(errs.all()); !strings.Contains(all, tc.msg) {
					t.Errorf("the partial success was not reported: %s", all)
				}
			})
		}
	}
}

// TestExportStatePartialRuns: partial successes count as exports, not
// failures, and only the first of a run is to be reported; a clean export
// ends the run, and a failure does not start one.
func TestExportStatePartialRuns(t *testing.T) {
	s := &exportState{sel: selection{signal: "metrics"}}
	var firsts []bool
	firsts = append(firsts, s.partial(), s.partial())
	s.done(nil)
	firsts = append(firsts, s.partial())
	s.done(fmt.Errorf("down"))
	firsts = append(firsts, s.partial())
	if fmt.Sprint(firsts) != "[true false true false]" {
		t.Errorf("first of a run: %v", firsts)
	}
	if st := s.status(); st.Exports != 6 || st.Failures != 1 || st.Err != nil {
		t.Errorf("%d exports, %d failures, err %v", st.Exports, st.Failures, st.Err)
	}
}
