package overhead

import (
	"context"
	"net"
	"sync"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/grpc"
)

// Receiver is an OTLP/gRPC receiver that counts, per service.name, the
// spans, root spans and metric exports it gets. Safe for concurrent use.
type Receiver struct {
	// Endpoint is the URL to point an exporter at (http://127.0.0.1:port).
	Endpoint string

	srv  *grpc.Server
	done chan struct{}

	mu     sync.Mutex
	counts map[string]*Counts
}

// Counts are what one service sent.
type Counts struct {
	Spans, Roots, MetricExports int
}

// StartReceiver listens on a free loopback port.
func StartReceiver() (*Receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{Endpoint: "http://" + l.Addr().String(), srv: grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)),
		done: make(chan struct{}), counts: map[string]*Counts{}}
	coltracepb.RegisterTraceServiceServer(r.srv, traceService{r: r})
	colmetricpb.RegisterMetricsServiceServer(r.srv, metricsService{r: r})
	go func() { defer close(r.done); _ = r.srv.Serve(l) }()
	return r, nil
}

// Stop ends the receiver.
func (r *Receiver) Stop() {
	r.srv.Stop()
	<-r.done
}

// Counts returns what service has sent so far.
func (r *Receiver) Counts(service string) Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.counts[service]; c != nil {
		return *c
	}
	return Counts{}
}

func (r *Receiver) add(res *resourcepb.Resource, f func(*Counts)) {
	name := ""
	for _, kv := range res.GetAttributes() {
		if kv.GetKey() == "service.name" {
			name = kv.GetValue().GetStringValue()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[name]
	if c == nil {
		c = &Counts{}
		r.counts[name] = c
	}
	f(c)
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, m *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range m.GetResourceSpans() {
		spans, roots := 0, 0
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				spans++
				if len(sp.GetParentSpanId()) == 0 {
					roots++
				}
			}
		}
		s.r.add(rs.GetResource(), func(c *Counts) { c.Spans += spans; c.Roots += roots })
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	r *Receiver
}

func (s metricsService) Export(_ context.Context, m *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	for _, rm := range m.GetResourceMetrics() {
		s.r.add(rm.GetResource(), func(c *Counts) { c.MetricExports++ })
	}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}
