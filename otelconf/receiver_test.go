package otelconf

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// receiver is an in-process OTLP receiver speaking the real wire
// protocols — gRPC through grpc-go with the collector's service
// definitions, or HTTP with protobuf bodies — and keeping what it got.
type receiver struct {
	// Endpoint is the URL to point an exporter at (http://127.0.0.1:port).
	Endpoint string

	mu      sync.Mutex
	spans   []string // span names
	res     []map[string]string
	metrics []*metricpb.Metric
	headers []map[string]string
}

type receiverOpts struct {
	http    bool // OTLP/HTTP instead of gRPC
	traces  bool // serve the trace service
	metrics bool // serve the metrics service
}

func startReceiver(t *testing.T, o receiverOpts) *receiver {
	t.Helper()
	r := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Endpoint = "http://" + ln.Addr().String()
	if o.http {
		srv := httptest.NewUnstartedServer(r.httpHandler(o))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return r
	}
	gs := grpc.NewServer()
	if o.traces {
		coltracepb.RegisterTraceServiceServer(gs, traceService{r: r})
	}
	if o.metrics {
		colmetricpb.RegisterMetricsServiceServer(gs, metricsService{r: r})
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(ln) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return r
}

func (r *receiver) httpHandler(o receiverOpts) http.Handler {
	mux := http.NewServeMux()
	if o.traces {
		mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
			var m coltracepb.ExportTraceServiceRequest
			if !readProto(w, req, &m) {
				return
			}
			r.addTraces(&m, headerMap(req.Header))
			writeProto(w, &coltracepb.ExportTraceServiceResponse{})
		})
	}
	if o.metrics {
		mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
			var m colmetricpb.ExportMetricsServiceRequest
			if !readProto(w, req, &m) {
				return
			}
			r.addMetrics(&m, headerMap(req.Header))
			writeProto(w, &colmetricpb.ExportMetricsServiceResponse{})
		})
	}
	return mux
}

func readProto(w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	b, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func headerMap(h http.Header) map[string]string {
	m := map[string]string{}
	for k, v := range h {
		m[http.CanonicalHeaderKey(k)] = v[0]
	}
	return m
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *receiver
}

func (s traceService) Export(ctx context.Context, m *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.r.addTraces(m, mdMap(ctx))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	r *receiver
}

func (s metricsService) Export(ctx context.Context, m *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	s.r.addMetrics(m, mdMap(ctx))
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

func mdMap(ctx context.Context) map[string]string {
	md, _ := metadata.FromIncomingContext(ctx)
	m := map[string]string{}
	for k, v := range md {
		m[http.CanonicalHeaderKey(k)] = v[0]
	}
	return m
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

func (r *receiver) addTraces(m *coltracepb.ExportTraceServiceRequest, h map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, h)
	for _, rs := range m.ResourceSpans {
		r.res = append(r.res, attrs(rs.GetResource().GetAttributes()))
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, s.Name)
			}
		}
	}
}

func (r *receiver) addMetrics(m *colmetricpb.ExportMetricsServiceRequest, h map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, h)
	for _, rm := range m.ResourceMetrics {
		r.res = append(r.res, attrs(rm.GetResource().GetAttributes()))
		for _, sm := range rm.ScopeMetrics {
			r.metrics = append(r.metrics, sm.Metrics...)
		}
	}
}

func (r *receiver) spanCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// metric returns the latest point of the named metric.
func (r *receiver) metric(name string) *metricpb.Metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.metrics) - 1; i >= 0; i-- {
		if r.metrics[i].Name == name {
			return r.metrics[i]
		}
	}
	return nil
}

func (r *receiver) resources() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), r.res...)
}

func (r *receiver) allHeaders() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]string(nil), r.headers...)
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// silentListener accepts connections and never answers: a backend that
// hangs.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return "http://" + ln.Addr().String()
}
