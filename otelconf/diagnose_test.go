package otelconf

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClassify: the errors the OTLP exporters returned against a real
// Jaeger (ports 4317 and 4318), a closed port and a TLS mismatch, as
// printed, each read as its likely cause.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Cause
	}{
		{errors.New(`traces export: context deadline exceeded: rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: http2: failed reading the frame payload: http2: frame too large, note that the frame header looked like an HTTP/1.1 header"`), CauseNotGRPC},
		{errors.New(`traces export: Post "http://127.0.0.1:24317/v1/traces": net/http: HTTP/1.x transport connection broken: malformed HTTP response "\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x05\x00\x00@\x00"`), CauseNotHTTP},
		{errors.New(`traces export: Post "http://127.0.0.1:37925/v1/traces": readLoopPeekFailLocked: %!w(<nil>)`), CauseNotHTTP},
		// From a suite run beside two CPU burners: the gRPC server closed the connection mid-write.
		{errors.New(`failed to upload metrics: Post "http://127.0.0.1:34349/v1/metrics": readfrom tcp 127.0.0.1:34190->127.0.0.1:34349: write tcp 127.0.0.1:34190->127.0.0.1:34349: use of closed network connection`), CauseNotHTTP},
		{errors.New(`rpc error: code = Unavailable desc = error reading from server: read tcp 127.0.0.1:1->127.0.0.1:2: use of closed network connection`), CauseUnknown},
		{errors.New(`failed to upload metrics: rpc error: code = Unimplemented desc = unknown service opentelemetry.proto.collector.metrics.v1.MetricsService`), CauseRefused},
		{fmt.Errorf("failed to upload metrics: %w", status.Error(codes.Unimplemented, "unknown service")), CauseRefused},
		{errors.New(`failed to upload metrics: failed to send metrics to http://127.0.0.1:24318/v1/metrics: 404 Not Found (body: 404 page not found)`), CauseRefused},
		{errors.New(`traces export: context deadline exceeded: rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), CauseUnreachable},
		{errors.New(`traces export: Post "http://nowhere.invalid:4318/v1/traces": dial tcp: lookup nowhere.invalid: no such host`), CauseUnreachable},
		{errors.New(`traces export: Post "https://127.0.0.1:24317/v1/traces": tls: first record does not look like a TLS handshake`), CauseTLSMismatch},
		{errors.New(`Post "https://h/v1/traces": http: server gave HTTP response to HTTPS client`), CauseTLSMismatch},
		{errors.New(`x509: certificate signed by unknown authority`), CauseCertificate},
		// An mTLS server the exporters sent no client certificate, as
		// printed over gRPC and OTLP/HTTP (TestTLSFiles's receiver, TLS
		// 1.3; a write before the alert is read can see a broken pipe
		// instead), and one whose CA the server does not trust.
		{errors.New(`traces export: exporter export timeout: rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: remote error: tls: certificate required"`), CauseCertificate},
		{errors.New(`traces export: Post "https://127.0.0.1:37491/v1/traces": remote error: tls: certificate required`), CauseCertificate},
		{errors.New(`Post "https://h/v1/traces": remote error: tls: unknown certificate authority`), CauseCertificate},
		{fmt.Errorf("export: %w", status.Error(codes.Unauthenticated, "no token")), CauseAuth},
		{errors.New(`failed to send to http://h/v1/traces: 401 Unauthorized`), CauseAuth},
		{errors.New(`rpc error: code = ResourceExhausted desc = grpc: received message larger than max (5242880 vs. 4194304)`), CauseTooLarge},
		{fmt.Errorf("traces export: %w", context.DeadlineExceeded), CauseTimeout},
		// A backend that throttles (a rate limit, a quota) until the export
		// timeout, as printed against a gRPC server answering
		// RESOURCE_EXHAUSTED with RetryInfo and an HTTP one answering 429
		// with Retry-After: not a message too large, nor a silent backend.
		{errors.New(`traces export: context deadline exceeded: rpc error: code = ResourceExhausted desc = rate limit exceeded`), CauseThrottled},
		{fmt.Errorf("failed to upload metrics: %w", status.Error(codes.ResourceExhausted, "quota exceeded")), CauseThrottled},
		{errors.New(`traces export: context deadline exceeded: retry-able request failure: body: rate limit exceeded`), CauseThrottled},
		{errors.New(`traces export: context deadline exceeded: retry-able request failure: Post "http://h/v1/traces": net/http: timeout awaiting response headers`), CauseTimeout},
		{errors.New(`traces export: request message too large: exceeded 4194304 bytes`), CauseTooLarge},
		{errors.New("something else"), CauseUnknown},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestExportErrorMessage: each cause's message names the target, says
// refused or failed, and carries the exporter's error.
func TestExportErrorMessage(t *testing.T) {
	for c := CauseUnknown; c <= CauseThrottled; c++ {
		xe := &ExportError{Signal: "metrics", Target: "h:4317 (otlp/grpc)", Cause: c, Err: errors.New("boom"), envSuffix: "METRICS"}
		msg := xe.Error()
		verb := " failed"
		if c == CauseRefused {
			verb = " refused"
		}
		if !strings.HasPrefix(msg, "otelconf: metrics export to h:4317 (otlp/grpc)"+verb) || !strings.HasSuffix(msg, ": boom") {
			t.Errorf("%v: %q", c, msg)
		}
		if (xe.Hint() == "") != (c == CauseUnknown) || c.String() == "unknown" && c != CauseUnknown {
			t.Errorf("%v: hint %q", c, xe.Hint())
		}
		if !errors.Is(xe, xe.Err) {
			t.Errorf("%v: does not unwrap", c)
		}
	}
	if s := Cause(99).String(); s != "unknown" {
		t.Errorf("Cause(99) = %q", s)
	}
}

// FuzzClassify: any error text gets a cause, and the message built on it
// keeps the text.
func FuzzClassify(f *testing.F) {
	f.Add(`malformed HTTP response "\x00\x00`)
	f.Add("rpc error: code = Unimplemented desc = x")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c := classify(errors.New(s))
		if c < CauseUnknown || c > CauseThrottled {
			t.Fatalf("cause %d", c)
		}
		xe := &ExportError{Signal: "traces", Target: "x", Cause: c, Err: errors.New(s)}
		if !strings.HasSuffix(xe.Error(), s) {
			t.Fatalf("message %q lost the error", xe.Error())
		}
	})
}

// FuzzOverrideURL: any endpoint string is refused with an error or turned
// into an http(s) URL with a host.
func FuzzOverrideURL(f *testing.F) {
	for _, s := range []string{"127.0.0.1:4317", "http://h:4318", "https://h/p", "nowhere", "ftp://x", "[::1]:4317", "http://", ":0"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, ep string, http bool) {
		proto := "grpc"
		if http {
			proto = "http/protobuf"
		}
		u, err := overrideURL(ep, proto, "traces")
		if err != nil {
			if u != "" {
				t.Fatalf("%q: both %q and %v", ep, u, err)
			}
			return
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			t.Fatalf("%q -> %q", ep, u)
		}
	})
}

// TestCertificateHint: a certificate failure the server reported (mTLS:
// our client certificate missing or refused) names the client certificate
// variables; one of the server's certificate names the CA variable.
func TestCertificateHint(t *testing.T) {
	for _, tc := range []struct{ err, want string }{
		{`Post "https://h/v1/traces": remote error: tls: certificate required`, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{`x509: certificate signed by unknown authority`, "OTEL_EXPORTER_OTLP_CERTIFICATE names the CA"},
	} {
		xe := &ExportError{Signal: "traces", Target: "h", Cause: classify(errors.New(tc.err)), Err: errors.New(tc.err)}
		if xe.Cause != CauseCertificate || !strings.Contains(xe.Hint(), tc.want) {
			t.Errorf("%q: cause %v, hint %q; want %q", tc.err, xe.Cause, xe.Hint(), tc.want)
		}
	}
}
