package openaihttp

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/httpconv"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/textcap"
)

// durationBuckets are otelhttp's boundaries for the HTTP durations,
// extended past its 10 s: an LLM request routinely takes longer, and a
// histogram whose top bucket is 10 s cannot tell 15 s from 10 minutes.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
	20, 40, 80, 160, 320, 640}

// instruments are the layer's own metrics.
type instruments struct {
	server        httpconv.ServerRequestDuration
	client        httpconv.ClientRequestDuration
	truncated     metric.Int64Counter
	budgetRefused metric.Int64Counter
	stalls        metric.Int64Counter

	mu   sync.Mutex
	sets map[setKey][]metric.RecordOption // the duration metrics' attribute sets, bounded
}

// setKey is what a duration metric's attribute set depends on: all of it
// bounded (routes are configured, methods and status codes normalized).
type setKey struct {
	client               bool
	method, route, proto string
	scheme, errType      string
	status               int
}

func newInstruments(m metric.Meter) (*instruments, error) {
	in := &instruments{sets: map[setKey][]metric.RecordOption{}}
	var err error
	b := metric.WithExplicitBucketBoundaries(durationBuckets...)
	if in.server, err = httpconv.NewServerRequestDuration(m, b); err != nil {
		return nil, err
	}
	if in.client, err = httpconv.NewClientRequestDuration(m, b); err != nil {
		return nil, err
	}
	if in.truncated, err = m.Int64Counter(attributes.MetricAttributesTruncated, metric.WithUnit("{attribute}"),
		metric.WithDescription("Client-supplied strings cut at their cap, or with invalid UTF-8 replaced, before they became attributes, by llm.truncated.key.")); err != nil {
		return nil, err
	}
	if in.budgetRefused, err = m.Int64Counter(attributes.MetricHTTPBodyBudgetRefused, metric.WithUnit("{buffer}"),
		metric.WithDescription("Body buffers not grown because the memory budget for bodies was spent.")); err != nil {
		return nil, err
	}
	if in.stalls, err = m.Int64Counter(MetricStalls, metric.WithUnit("{stall}"),
		metric.WithDescription("Gaps between stream chunks far above the request's own median.")); err != nil {
		return nil, err
	}
	return in, nil
}

// set returns the attribute set for k as record options, cached (at most
// 1,024 sets): built once, not per measurement as httpconv's RecordSet
// does (two allocations a measurement).
func (in *instruments) set(k setKey, server string, port int) []metric.RecordOption {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.sets[k]; ok {
		return s
	}
	kv := []attribute.KeyValue{attributes.HTTPRequestMethod.String(k.method), attributes.URLScheme.String(k.scheme)}
	if k.client {
		kv = append(kv, attributes.ServerAddress.String(server), attributes.ServerPort.Int(port))
	}
	if k.route != "" {
		kv = append(kv, attributes.HTTPRoute.String(k.route))
	}
	if k.status > 0 {
		kv = append(kv, attributes.HTTPStatusCode.Int(k.status))
	}
	if k.proto != "" {
		kv = append(kv, attributes.NetworkProtocolName.String("http"), attributes.NetworkProtocolVersion.String(k.proto))
	}
	if k.errType != "" {
		kv = append(kv, attributes.ErrorType.String(k.errType))
	}
	s := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	if len(in.sets) < 1024 {
		in.sets[k] = s
	}
	return s
}

// recordServer records http.server.request.duration. errType is the
// HTTP conventions' error.type: the status code for 5xx, else the
// failure's own type ("" when none).
func (in *instruments) recordServer(r *http.Request, route string, status int, errType string, d time.Duration) {
	k := setKey{method: method(r.Method), route: route, proto: protoVersion(r.ProtoMajor, r.ProtoMinor), scheme: scheme(r), status: status, errType: errType}
	in.server.Inst().Record(context.Background(), d.Seconds(), in.set(k, "", 0)...)
}

// recordClient records http.client.request.duration of an upstream call.
func (in *instruments) recordClient(m, schemeName, host string, port, status int, errType string, d time.Duration) {
	k := setKey{client: true, method: method(m), scheme: schemeName, status: status, errType: errType}
	in.client.Inst().Record(context.Background(), d.Seconds(), in.set(k, host, port)...)
}

// httpErrorType is the HTTP conventions' error.type of a response: the
// status code of a 5xx (a server's own failure), else the failure named.
// A failure that is the status itself (the request's error.type of a
// status ≥ 400) is no failure of the server's below 500: the conventions
// give a server's 4xx no error.type.
func httpErrorType(status int, failure string) string {
	if failure != "" && failure != "abort" && !isStatus(failure, status) {
		return failure
	}
	if status >= 500 {
		return strconv.Itoa(status)
	}
	return ""
}

// isStatus reports whether s is status written in decimal (without
// strconv.Itoa, which allocates for three digits).
func isStatus(s string, status int) bool {
	return len(s) == 3 && status >= 100 && status <= 999 &&
		s[0] == byte('0'+status/100) && s[1] == byte('0'+status/10%10) && s[2] == byte('0'+status%10)
}

// method is the conventions' http.request.method: a known method, or
// _OTHER (a client cannot invent metric series). A switch, not a map: it
// runs on every request, mostly with cold caches.
func method(m string) string {
	switch m {
	case http.MethodPost, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// protoVersion is network.protocol.version: "1.1", "2", … ("" unknown).
func protoVersion(major, minor int) string {
	switch {
	case major == 1 && minor == 1:
		return "1.1"
	case major == 1 && minor == 0:
		return "1.0"
	case major == 2:
		return "2"
	case major == 3:
		return "3"
	}
	return ""
}

// Caps on header-derived values the layer puts on spans.
const (
	maxHostLength      = 255 // a DNS name
	maxUserAgentLength = 512
)

// serverAttrs are the HTTP conventions' attributes of the server side,
// put on the request's root span. Header-derived values are capped (and
// the cuts counted).
func (c *config) serverAttrs(r *http.Request, route string) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, 9)
	a = append(a, attributes.HTTPRequestMethod.String(method(r.Method)), attributes.URLScheme.String(scheme(r)),
		attributes.HTTPRoute.String(route))
	if v := protoVersion(r.ProtoMajor, r.ProtoMinor); v != "" {
		a = append(a, attributes.NetworkProtocolName.String("http"), attributes.NetworkProtocolVersion.String(v))
	}
	if host, port := splitHostPort(r.Host); host != "" {
		a = append(a, attributes.ServerAddress.String(c.capped(host, maxHostLength, attributes.ServerAddress)))
		if port > 0 {
			a = append(a, attributes.ServerPort.Int(port))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		a = append(a, attributes.UserAgentOriginal.String(c.capped(ua, maxUserAgentLength, attributes.UserAgentOriginal)))
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		a = append(a, attributes.ClientAddress.String(ip))
	}
	return a
}

// capped is s as valid UTF-8 cut at n bytes, counting a change under key:
// it comes from the client, and one invalid string would fail an SDK
// exporter's whole batch.
func (c *config) capped(s string, n int, key attribute.Key) string {
	s, changed := textcap.Clean(s, n)
	if changed {
		c.countTruncated(key)
	}
	return s
}

// splitHostPort splits a Host header; port is 0 when absent or invalid.
func splitHostPort(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return strings.Trim(hostport, "[]"), 0
	}
	port, _ := strconv.Atoi(p)
	if port < 1 || port > 65535 {
		port = 0
	}
	return host, port
}
