package otelconf

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlaintextSchemeIgnoresCertificate: an http:// endpoint is plaintext
// (the specification: the scheme decides, and the certificate variables
// are for a secure connection only), also with a CA or client certificate
// set for other endpoints, as a cluster-wide OTEL_EXPORTER_OTLP_CERTIFICATE
// is. The Go gRPC exporter let the certificate win and spoke TLS to the
// plaintext receiver (every export failed, the hint saying to use http://,
// which was used); the OTLP/HTTP one refused to start, so the command did
// not either.
func TestPlaintextSchemeIgnoresCertificate(t *testing.T) {
	ca := testCAFile(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE"} {
			t.Run(proto+"/"+v, func(t *testing.T) {
				rec := startReceiver(t, receiverOpts{http: proto != "grpc", traces: true, metrics: true})
				cleanEnv(t, "OTEL_EXPORTER_OTLP_ENDPOINT", rec.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL", proto, v, ca,
					"OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
				errs := captureErrors(t)
				p := setup(t, Config{})
				recordOne(t, p)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = p.Shutdown(ctx)
				st := p.Status()
				if rec.spanCount() != treeSpans || st.Metrics.Exports == 0 || st.Metrics.Failures != 0 {
					t.Errorf("%d spans reached the plaintext receiver at %s (want %d); status %s; errors %v",
						rec.spanCount(), rec.Endpoint, treeSpans, st, errs.all())
				}
			})
		}
	}
}

// TestInsecureIgnoresCertificate: a gRPC target without a scheme
// (localhost:4317) with OTEL_EXPORTER_OTLP_INSECURE=true, or its per-signal
// form, is plaintext, as the specification defines the variable, also with
// a certificate variable set: the Go gRPC exporter let the certificate win
// and spoke TLS to the plaintext receiver.
func TestInsecureIgnoresCertificate(t *testing.T) {
	ca := testCAFile(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"general", []string{"OTEL_EXPORTER_OTLP_INSECURE", "true", "OTEL_EXPORTER_OTLP_CERTIFICATE", ca}},
		{"per signal", []string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "TRUE", "OTEL_EXPORTER_OTLP_INSECURE", "false", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", ca}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := startReceiver(t, receiverOpts{traces: true})
			target := "localhost:" + rec.Endpoint[strings.LastIndex(rec.Endpoint, ":")+1:]
			cleanEnv(t, append([]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", target, "OTEL_EXPORTER_OTLP_TIMEOUT", "2000"}, tc.env...)...)
			errs := captureErrors(t)
			p := setup(t, Config{})
			recordOne(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = p.Shutdown(ctx)
			if rec.spanCount() != treeSpans {
				t.Errorf("%d spans reached the plaintext receiver at %s (want %d); status %s; errors %v",
					rec.spanCount(), target, treeSpans, p.Status(), errs.all())
			}
		})
	}
}

// testCAFile writes a certificate (httptest's) as PEM and returns its path.
func testCAFile(t *testing.T) string {
	t.Helper()
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	defer ts.Close()
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestInsecureNotBoolean: an OTEL_EXPORTER_OTLP_INSECURE value neither true
// nor false (1, yes) is warned about, as the specification wants for a
// boolean: the exporters read it as false without a word, so a 1 meant to
// turn TLS off left it on, and every export to the plaintext collector
// failed.
func TestInsecureNotBoolean(t *testing.T) {
	for _, tc := range []struct {
		env    []string
		warned string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_INSECURE", "True"}, ""},
		{[]string{"OTEL_EXPORTER_OTLP_INSECURE", "false"}, ""},
		{[]string{"OTEL_EXPORTER_OTLP_INSECURE", "1"}, "OTEL_EXPORTER_OTLP_INSECURE"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "yes"}, "OTEL_EXPORTER_OTLP_TRACES_INSECURE"},
	} {
		t.Run(strings.Join(tc.env, "="), func(t *testing.T) {
			_, errs := selectTraces(t, tc.env...)
			all := errs.all()
			if tc.warned == "" && len(all) > 0 || tc.warned != "" && (len(all) != 1 || !strings.Contains(all[0].Error(), tc.warned)) {
				t.Errorf("warnings %v; want one naming %q", all, tc.warned)
			}
		})
	}
}

// TestClientCertificateHalfSet: a client certificate without its key (or a
// key without its certificate), in the general variables or a signal's, is
// warned about: the Go exporters send no client certificate then, without
// a word, and an mTLS backend refuses every export at the handshake.
func TestClientCertificateHalfSet(t *testing.T) {
	for _, tc := range []struct {
		env    []string
		warned string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "c.pem", "OTEL_EXPORTER_OTLP_CLIENT_KEY", "k.pem"}, ""},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "c.pem", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "k.pem"}, ""},
		{[]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "c.pem"}, "OTEL_EXPORTER_OTLP_CLIENT_KEY"},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "k.pem"}, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"},
	} {
		t.Run(strings.Join(tc.env, "="), func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY",
				"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"} {
				t.Setenv(k, "")
			}
			_, errs := selectTraces(t, tc.env...)
			all := errs.all()
			if tc.warned == "" && len(all) > 0 || tc.warned != "" && (len(all) != 1 || !strings.Contains(all[0].Error(), tc.warned)) {
				t.Errorf("warnings %v; want one naming %q", all, tc.warned)
			}
		})
	}
}
