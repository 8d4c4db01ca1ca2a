package otelconf

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
)

// TestEndpointQueryNotSent: the Go OTLP exporters send to an endpoint
// URL's host and path only, so its user info (user:pass@) and query
// (?api_key=…, ?tenant=…) never reach the backend. Setup says so, naming
// the variable but not the part, which often carries a credential, and
// Status and the export errors name the URL the exporter uses, without
// it. Before, it was dropped without a word, and shown, credential and
// all, in every status line and export error.
func TestEndpointQueryNotSent(t *testing.T) {
	var (
		mu   sync.Mutex
		urls []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		urls = append(urls, req.URL.String())
		mu.Unlock()
		var m coltracepb.ExportTraceServiceRequest
		if readProto(w, req, &m) {
			writeProto(w, &coltracepb.ExportTraceServiceResponse{})
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		key, value, path, target string
		warned                   bool
	}{
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/x/v1/traces?api_key=secret", "/x/v1/traces", "/x/v1/traces", true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/v1/traces#secret", "/v1/traces", "/v1/traces", true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "/otlp?api_key=secret", "/otlp/v1/traces", "/otlp/v1/traces", true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/v1/traces", "/v1/traces", "/v1/traces", false},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "user:secret@/v1/traces", "/v1/traces", "/v1/traces", true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "user:secret@/", "/v1/traces", "/v1/traces", true},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			mu.Lock()
			urls = nil
			mu.Unlock()
			ep := srv.URL + tc.value
			if user, rest, ok := strings.Cut(tc.value, "@"); ok {
				ep = strings.Replace(srv.URL, "://", "://"+user+"@", 1) + rest
			}
			cleanEnv(t, tc.key, ep, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTEL_METRICS_EXPORTER", "none")
			errs := captureErrors(t)
			p := setup(t, Config{})
			recordOne(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			mu.Lock()
			got := fmt.Sprint(urls)
			mu.Unlock()
			if got != "["+tc.path+"]" {
				t.Errorf("requests to %s, want [%s]", got, tc.path)
			}
			st := p.Status().String()
			if !strings.Contains(st, srv.URL+tc.target+" (otlp/http/protobuf)") || strings.Contains(st, "secret") {
				t.Errorf("status %s", st)
			}
			all := fmt.Sprint(errs.all())
			if warned := strings.Contains(all, tc.key+": the URL's user info, query or fragment"); warned != tc.warned || strings.Contains(all, "secret") {
				t.Errorf("warned %v, want %v: %s", warned, tc.warned, all)
			}
		})
	}
}

// TestEndpointUserInfoGRPC: over gRPC too, an endpoint's user info is not
// sent: warned about, and kept out of the status line.
func TestEndpointUserInfoGRPC(t *testing.T) {
	rec := startReceiver(t, receiverOpts{traces: true})
	ep := strings.Replace(rec.Endpoint, "://", "://user:secret@", 1)
	cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", ep, "OTEL_METRICS_EXPORTER", "none")
	errs := captureErrors(t)
	p := setup(t, Config{})
	recordOne(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
	if st := p.Status().String(); rec.spanCount() != treeSpans || strings.Contains(st, "secret") || !strings.Contains(st, rec.Endpoint+" (otlp/grpc)") {
		t.Errorf("%d spans; status %s", rec.spanCount(), st)
	}
	if all := fmt.Sprint(errs.all()); !strings.Contains(all, "OTEL_EXPORTER_OTLP_ENDPOINT: the URL's user info") || strings.Contains(all, "secret") {
		t.Errorf("warnings %s", all)
	}
}
