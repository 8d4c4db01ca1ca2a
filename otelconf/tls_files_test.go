package otelconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// pki is a test CA's files and a server certificate it signed.
type pki struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
	pool                      *x509.CertPool
}

// newPKI writes a CA, a client certificate and its key as PEM files, and
// returns them with a server certificate for 127.0.0.1 signed by the CA.
func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(n int64, cn string, server bool) (tls.Certificate, []byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tm := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature}
		if server {
			tm.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tm.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tm.DNSNames = []string{"localhost"}
		} else {
			tm.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		der, _ := x509.CreateCertificate(rand.Reader, tm, ca, &k.PublicKey, caKey)
		kb, _ := x509.MarshalECPrivateKey(k)
		cp := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		kp := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
		c, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return c, cp, kp
	}
	srv, _, _ := leaf(2, "server", true)
	_, ccp, ckp := leaf(3, "client", false)
	p := pki{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "c.pem"), keyFile: filepath.Join(dir, "k.pem"), server: srv, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	for f, b := range map[string][]byte{p.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), p.certFile: ccp, p.keyFile: ckp} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// startTLSReceiver is an OTLP receiver over TLS that requires a client
// certificate signed by pk's CA; it returns its https:// endpoint.
func startTLSReceiver(t *testing.T, pk pki, httpProto bool) (*receiver, string) {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{pk.server}, ClientCAs: pk.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	r := &receiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if httpProto {
		srv := httptest.NewUnstartedServer(r.httpHandler(receiverOpts{http: true, traces: true}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.TLS = cfg
		srv.StartTLS()
		t.Cleanup(srv.Close)
	} else {
		gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
		coltracepb.RegisterTraceServiceServer(gs, traceService{r: r})
		done := make(chan struct{})
		go func() { defer close(done); _ = gs.Serve(ln) }()
		t.Cleanup(func() { gs.Stop(); <-done })
	}
	return r, "https://" + ln.Addr().String()
}

// tlsVars are the certificate variables of traces, emptied for each case.
var tlsVars = []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY",
	"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"}

// TestTLSFiles: the certificate variables reach an mTLS receiver over both
// protocols, general or per signal; a file the exporters cannot use — a CA
// file missing or without a PEM certificate, a client certificate and key
// that do not load — fails Setup with a ConfigError naming the variable.
// Before, the exporters logged it where nobody looks and went on without
// it, and every export failed at the handshake ("certificate signed by
// unknown authority", "certificate required"), every span lost, the hint
// pointing at a variable that was set. A plaintext endpoint reads none of
// them (a cluster-wide CA variable may name a file this host lacks).
func TestTLSFiles(t *testing.T) {
	pk := newPKI(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, proto := range []string{"grpc", "http/protobuf"} {
		for _, tc := range []struct {
			name      string
			env       []string
			plaintext bool
			refused   string // the variable the ConfigError names; "" for spans that arrive
		}{
			{name: "general", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", pk.caFile,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pk.certFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY", pk.keyFile}},
			{name: "per signal", env: []string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", pk.caFile, "OTEL_EXPORTER_OTLP_CERTIFICATE", missing,
				"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", pk.certFile, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", pk.keyFile,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", missing, "OTEL_EXPORTER_OTLP_CLIENT_KEY", missing}},
			{name: "CA missing", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", missing,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pk.certFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY", pk.keyFile},
				refused: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
			{name: "CA not PEM", env: []string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM},
				refused: "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
			{name: "client certificate missing", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", pk.caFile,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", missing, "OTEL_EXPORTER_OTLP_CLIENT_KEY", pk.keyFile},
				refused: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
			{name: "key is not the certificate's", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", pk.caFile,
				"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", pk.certFile, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", pk.caFile},
				refused: "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"},
			// A device named by mistake: read whole, it grew the
			// process until the kernel killed it.
			{name: "CA is /dev/zero", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/dev/zero"},
				refused: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
			{name: "client key is /dev/zero", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", pk.caFile,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", pk.certFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY", "/dev/zero"},
				refused: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
			{name: "plaintext reads none", plaintext: true, env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", missing,
				"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", missing, "OTEL_EXPORTER_OTLP_CLIENT_KEY", notPEM}},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				var rec *receiver
				var ep string
				if tc.plaintext {
					rec = startReceiver(t, receiverOpts{http: proto != "grpc", traces: true})
					ep = rec.Endpoint
				} else {
					rec, ep = startTLSReceiver(t, pk, proto != "grpc")
				}
				for _, k := range tlsVars {
					t.Setenv(k, "")
				}
				cleanEnv(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", ep, "OTEL_EXPORTER_OTLP_PROTOCOL", proto,
					"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_TIMEOUT", "5000"}, tc.env...)...)
				errs := captureErrors(t)
				p, err := Setup(context.Background(), Config{})
				if tc.refused != "" {
					var ce *ConfigError
					if !errors.As(err, &ce) || ce.Name != tc.refused {
						t.Fatalf("Setup: %v; want a ConfigError naming %s", err, tc.refused)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				recordOne(t, p)
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				_ = p.Shutdown(ctx)
				if rec.spanCount() != treeSpans {
					t.Errorf("%d spans arrived at %s, want %d: %s; %v", rec.spanCount(), ep, treeSpans, p.Status(), errs.all())
				}
				if strings.Contains(p.Status().String(), "dropped") {
					t.Errorf("status %s", p.Status())
				}
			})
		}
	}
}
