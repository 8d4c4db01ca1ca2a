package otelconf

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cause is the likely reason an export failed, read from the exporter's
// error: what an operator has to change.
type Cause int

// The causes Setup's exporters recognise.
const (
	// CauseUnknown: the error says nothing this package recognises.
	CauseUnknown Cause = iota
	// CauseNotGRPC: the gRPC exporter got an HTTP/1.1 answer — the
	// endpoint is OTLP/HTTP (port 4318 by convention).
	CauseNotGRPC
	// CauseNotHTTP: the HTTP exporter got HTTP/2 frames — the endpoint is
	// OTLP/gRPC (port 4317 by convention).
	CauseNotHTTP
	// CauseRefused: the backend does not take this signal (gRPC
	// Unimplemented, HTTP 404) — Jaeger takes traces only.
	CauseRefused
	// CauseUnreachable: nothing accepts connections at the endpoint, or
	// its host name does not resolve.
	CauseUnreachable
	// CauseTLSMismatch: TLS on one side only (an https:// endpoint
	// against a plaintext server, or the reverse).
	CauseTLSMismatch
	// CauseCertificate: the server's certificate was not accepted, or
	// the server did not accept ours (mTLS).
	CauseCertificate
	// CauseAuth: the backend refused the credentials.
	CauseAuth
	// CauseTooLarge: one export was larger than the backend accepts.
	CauseTooLarge
	// CauseTimeout: no answer within the export timeout.
	CauseTimeout
	// CauseThrottled: the backend kept answering "busy, retry later"
	// (HTTP 429, 502, 503 or 504; gRPC RESOURCE_EXHAUSTED other than a
	// message too large) until the export timeout.
	CauseThrottled
)

var causeNames = [...]string{
	CauseUnknown:     "unknown",
	CauseNotGRPC:     "not_grpc",
	CauseNotHTTP:     "not_http",
	CauseRefused:     "refused",
	CauseUnreachable: "unreachable",
	CauseTLSMismatch: "tls_mismatch",
	CauseCertificate: "certificate",
	CauseAuth:        "auth",
	CauseTooLarge:    "too_large",
	CauseTimeout:     "timeout",
	CauseThrottled:   "throttled",
}

// String is the cause's short name (e.g. "not_grpc").
func (c Cause) String() string {
	if c < 0 || int(c) >= len(causeNames) {
		return "unknown"
	}
	return causeNames[c]
}

// ExportError is a failed export with its likely cause. Setup's exporters
// return it (traces) or report it (metrics) through otel.Handle, once per
// run of failures; Status holds the latest.
type ExportError struct {
	// Signal is "traces" or "metrics".
	Signal string
	// Target is where the export went, as Status shows it (e.g.
	// "localhost:4318 (otlp/grpc)").
	Target string
	// Cause is the likely reason.
	Cause Cause
	// Err is the exporter's error.
	Err error

	envSuffix string // TRACES or METRICS, for the variable names in the hint
	protocol  string // grpc or http/protobuf for OTLP
}

var _ error = (*ExportError)(nil)

func (e *ExportError) Error() string {
	var b strings.Builder
	b.WriteString("otelconf: ")
	b.WriteString(e.Signal)
	b.WriteString(" export to ")
	b.WriteString(e.Target)
	if e.Cause == CauseRefused {
		b.WriteString(" refused")
	} else {
		b.WriteString(" failed")
	}
	if h := e.Hint(); h != "" {
		b.WriteString(": ")
		b.WriteString(h)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ExportError) Unwrap() error { return e.Err }

// Hint says what the cause means and what to change, naming the
// variables; "" for CauseUnknown.
func (e *ExportError) Hint() string {
	s := e.envSuffix
	switch e.Cause {
	case CauseNotGRPC:
		return "the endpoint answered in HTTP/1.1, not gRPC: it is likely an OTLP/HTTP endpoint (port 4318 by convention); " +
			"set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, or point at the OTLP/gRPC endpoint (port 4317)"
	case CauseNotHTTP:
		return "the endpoint answered in HTTP/2 frames: it is likely an OTLP/gRPC endpoint (port 4317 by convention); " +
			"set OTEL_EXPORTER_OTLP_PROTOCOL=grpc (llmtrace's default), or point at the OTLP/HTTP endpoint (port 4318)"
	case CauseRefused:
		path := ""
		if e.protocol == "http/protobuf" {
			path = ", or a per-signal OTEL_EXPORTER_OTLP_" + s + "_ENDPOINT lacks its /v1/" + e.Signal + " path"
		}
		return "the backend does not accept " + e.Signal + " (Jaeger takes traces only)" + path +
			"; set OTEL_" + s + "_EXPORTER=none to stop sending them"
	case CauseUnreachable:
		return "nothing accepts connections there: is the collector running, and is OTEL_EXPORTER_OTLP_ENDPOINT right?"
	case CauseTLSMismatch:
		return "TLS on one side only: use an http:// endpoint for a plaintext receiver, https:// for a TLS one"
	case CauseCertificate:
		if e.Err != nil && strings.Contains(e.Err.Error(), "remote error: tls:") {
			return "the server did not accept our TLS client certificate, or wants one (OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY name it)"
		}
		return "the server's TLS certificate was not accepted (OTEL_EXPORTER_OTLP_CERTIFICATE names the CA to trust)"
	case CauseAuth:
		return "the backend refused the credentials (OTEL_EXPORTER_OTLP_HEADERS)"
	case CauseTooLarge:
		return "one export was larger than the backend accepts: lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
	case CauseThrottled:
		return "the backend kept asking to retry later (HTTP 429 or 5xx, gRPC RESOURCE_EXHAUSTED: a rate limit or quota, or an overloaded collector) until the export timeout: " +
			"raise the backend's limit, or sample fewer traces (OTEL_TRACES_SAMPLER); smaller batches would only mean more requests"
	case CauseTimeout:
		return "no answer within the export timeout (OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_BSP_EXPORT_TIMEOUT): the backend is slow, or the endpoint drops packets"
	}
	return ""
}

// classify reads the likely cause from an exporter's error. The OTLP
// exporters wrap gRPC statuses and net/http errors in text, so most causes
// are read from the message; the strings are those of grpc-go and net/http
// (TestClassify holds real examples).
func classify(err error) Cause {
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unimplemented:
			return CauseRefused
		case codes.Unauthenticated, codes.PermissionDenied:
			return CauseAuth
		}
	}
	msg := err.Error()
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(msg, s) {
				return true
			}
		}
		return false
	}
	switch {
	// Before the timeout: a gRPC exporter retries these until its
	// deadline, so the message says "context deadline exceeded" too.
	case has("frame too large", "looked like an HTTP/1.1 header"):
		return CauseNotGRPC
	// A gRPC server sends its HTTP/2 SETTINGS frame first: net/http
	// reads it as a malformed response, or, when it came before the
	// request was written, as bytes on an idle connection; or the server
	// has already closed the connection, on the HTTP/1.1 bytes it could
	// not read, while the request is still being written (on a busy
	// machine its close can come first). Only net/http's errors name the
	// request ("Post \"…\""): a gRPC exporter's closed connection is not
	// this.
	case has(`malformed HTTP response "\x00\x00`, "readLoopPeekFailLocked: %!w(<nil>)"),
		has(`Post "`) && has("use of closed network connection", "connection reset by peer"):
		return CauseNotHTTP
	case has("first record does not look like a TLS handshake", "server gave HTTP response to HTTPS client"):
		return CauseTLSMismatch
	// The server refusing our certificate, or asking for one (mTLS):
	// the alerts crypto/tls reports as "remote error".
	case has("x509:", "certificate signed by unknown authority", "remote error: tls: certificate required",
		"remote error: tls: bad certificate", "remote error: tls: unknown certificate authority",
		"remote error: tls: expired certificate", "remote error: tls: unsupported certificate",
		"remote error: tls: revoked certificate", "remote error: tls: access denied"):
		return CauseCertificate
	case has("connection refused", "no such host", "no route to host", "network is unreachable"):
		return CauseUnreachable
	case has("Unimplemented", "404 Not Found"):
		return CauseRefused
	case has("401 Unauthorized", "403 Forbidden"):
		return CauseAuth
	case has("413 Request Entity Too Large", "larger than max", "request message too large"):
		return CauseTooLarge
	// The answers the exporters retry until their deadline, so before
	// the timeout: net/http's retried statuses (whose text the exporter
	// keeps only as "body: …"), and a RESOURCE_EXHAUSTED that is not
	// about a message's size — a rate limit or quota.
	case has("retry-able request failure: body:", "429 Too Many Requests", "code = ResourceExhausted"):
		return CauseThrottled
	case errors.Is(err, context.DeadlineExceeded) || has("context deadline exceeded", "DeadlineExceeded"):
		return CauseTimeout
	}
	return CauseUnknown
}
