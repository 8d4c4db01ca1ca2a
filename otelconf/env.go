package otelconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/llmtrace/llmtrace/batch"
	"github.com/llmtrace/llmtrace/otelstats"
)

// DefaultProtocol is the OTLP protocol when neither
// OTEL_EXPORTER_OTLP_PROTOCOL nor its per-signal variant is set. The
// OpenTelemetry specification's default is http/protobuf; llmtrace's is
// gRPC, as its design and every command in its README (port 4317) have it.
// http/protobuf is one variable away.
const DefaultProtocol = "grpc"

// Environment variables of llmtrace's own, beside the OpenTelemetry ones.
const (
	// EnvSampling is the end-of-request sampling policy, in
	// otelstats.ParseSamplingPolicy's syntax.
	EnvSampling = "LLMTRACE_SAMPLING"
	// EnvDetail is the default detail level, 0–3 (otelstats.ParseDetail).
	EnvDetail = "LLMTRACE_DETAIL"
	// EnvCaptureContent is the GenAI convention's opt-in variable: "true"
	// records prompts and completions (otelstats.WithContentCapture).
	EnvCaptureContent = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
)

// selection is what the environment (and Config) chose for one signal.
type selection struct {
	signal string // "traces" or "metrics"
	suffix string // "TRACES" or "METRICS", as in the variable names
	// exporter is "otlp", or a name autoexport resolves (console,
	// prometheus, none, registered ones); "" when the signal is off.
	exporter string
	protocol string // with otlp: "grpc" or "http/protobuf"
	endpoint string // with otlp: where the exporter sends, for Status
	// timeout, when timeoutSet, is the export timeout given to the OTLP
	// exporter over what it reads itself (otlpTimeout).
	timeout    time.Duration
	timeoutSet bool
	// gzip is the compression variables' gzip in any case, given to the
	// OTLP exporter over its own reading (otlpCompression).
	gzip bool
	// override, with otlp, is the URL given to the exporter over what it
	// reads itself: Config.TracesEndpoint, or the specification's default
	// endpoint when no endpoint variable is set.
	override string
	// plaintext is a connection without TLS whatever the certificate
	// variables say (isPlaintext).
	plaintext bool
	// sdkObservability is OTEL_GO_X_OBSERVABILITY=true: the SDK's
	// exporters count what they send, which only their own encoding can.
	sdkObservability bool
}

// target is how Status and ExportError name where the signal goes.
func (s selection) target() string {
	switch s.exporter {
	case "otlp":
		return s.endpoint + " (otlp/" + s.protocol + ")"
	case "console":
		return "stdout (console)"
	case "prometheus":
		return "http://" + prometheusAddr() + "/metrics (prometheus)"
	}
	return s.exporter
}

// isPlaintext reports whether the exporter's connection is plaintext, as
// the specification has it: an http:// URL, or a gRPC target without a
// scheme and OTEL_EXPORTER_OTLP_INSECURE (or the per-signal one) true. The
// certificate variables apply to a secure connection only, but the Go
// exporters let a CA or client certificate from the environment win (gRPC
// then speaks TLS to a plaintext receiver, OTLP/HTTP refuses to start), so
// the exporters are told in code to use none.
func (s selection) isPlaintext() bool {
	if s.override != "" {
		u, err := url.Parse(s.override)
		return err == nil && u.Scheme == "http"
	}
	_, v := signalEnv(s.suffix, "INSECURE")
	return strings.EqualFold(v, "true") // as the exporters read it
}

// prometheusAddr is the address autoexport's Prometheus exporter listens
// on: host and port joined with a colon, as it joins them (an IPv6 host
// must come in brackets: checkPrometheusHost).
func prometheusAddr() string {
	return getenvOr("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost") + ":" + getenvOr("OTEL_EXPORTER_PROMETHEUS_PORT", "9464")
}

// checkPrometheusHost refuses an IPv6 OTEL_EXPORTER_PROMETHEUS_HOST
// without brackets (::1): autoexport joins it to the port with a colon,
// and the listen fails on "too many colons", blamed on the exporter name.
func checkPrometheusHost() error {
	const k = "OTEL_EXPORTER_PROMETHEUS_HOST"
	if v := os.Getenv(k); strings.Contains(v, ":") && !strings.HasPrefix(v, "[") {
		return &ConfigError{Name: k, Value: v, Reason: "write [" + v + "]: autoexport joins host and port with a colon, so an IPv6 address needs its brackets"}
	}
	return nil
}

// signalEnv is the signal's own variable OTEL_EXPORTER_OTLP_<suffix>_<name>
// when set, else the general OTEL_EXPORTER_OTLP_<name>: the one the
// exporters use (a per-signal value replaces the general one), and its
// key, for messages. Both blank: "", "".
func signalEnv(suffix, name string) (key, value string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_" + name, "OTEL_EXPORTER_OTLP_" + name} {
		if v := getenvTrim(k); v != "" {
			return k, v
		}
	}
	return "", ""
}

func getenvOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// sdkDisabled reads OTEL_SDK_DISABLED as the specification says: only
// "true" (any case) disables; another value than "false" or empty is
// reported and ignored.
func sdkDisabled() bool {
	v := strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED"))
	switch {
	case strings.EqualFold(v, "true"):
		return true
	case v != "" && !strings.EqualFold(v, "false"):
		otel.Handle(fmt.Errorf("otelconf: OTEL_SDK_DISABLED=%q is neither true nor false; ignored", v))
	}
	return false
}

// selectSignal reads OTEL_<SIGNAL>_EXPORTER and the OTLP variables. Unset,
// the exporter is otlp when an endpoint variable is set, and nothing
// otherwise: a command run without any OTEL_* exports nothing (the
// specification's default would try localhost and fail).
func selectSignal(signal, override string) (selection, error) {
	s := selection{signal: signal, suffix: strings.ToUpper(signal)}
	key := "OTEL_" + s.suffix + "_EXPORTER"
	name := strings.TrimSpace(os.Getenv(key))
	switch {
	case override != "":
		name = "otlp"
	case strings.Contains(name, ","):
		return s, &ConfigError{Name: key, Value: name, Reason: "one exporter per signal is supported"}
	case strings.EqualFold(name, "none"):
		return s, nil
	case name == "":
		if getenvTrim("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenvTrim("OTEL_EXPORTER_OTLP_"+s.suffix+"_ENDPOINT") == "" {
			return s, nil
		}
		name = "otlp"
	}
	if !strings.EqualFold(name, "otlp") {
		if err := exactExporterName(key, signal); err != nil {
			return s, err
		}
		if name == "prometheus" && signal == "metrics" {
			if err := checkPrometheusHost(); err != nil {
				return s, err
			}
		}
		s.exporter = name
		return s, nil
	}
	s.exporter = "otlp"
	s.sdkObservability = strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_GO_X_OBSERVABILITY")), "true")
	var err error
	if s.protocol, err = otlpProtocol(s.suffix); err != nil {
		return s, err
	}
	checkInsecure(s.suffix)
	checkClientCert(s.suffix)
	if err := checkHeaders(s.suffix, s.protocol); err != nil {
		return s, err
	}
	s.timeout, s.timeoutSet = otlpTimeout(s.suffix)
	s.gzip = otlpCompression(s.suffix)
	if override != "" {
		if s.override, err = overrideURL(override, s.protocol, signal); err != nil {
			return s, err
		}
		s.endpoint = s.override
		s.plaintext = s.isPlaintext()
		return s, checkTLSFiles(s)
	}
	if err := checkEndpoints(s.suffix, s.protocol); err != nil {
		return s, err
	}
	s.endpoint = otlpEndpoint(s.suffix, s.protocol, signal)
	if u, err := url.Parse(s.endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		// Given to the exporter in code, over what it reads itself:
		// the specification's default endpoint when no variable is set
		// (plaintext; the Go exporters' own default is TLS), and an
		// http:// or https:// endpoint's scheme over
		// OTEL_EXPORTER_OTLP_INSECURE, as the specification has it
		// (the Go exporters apply the variable after the scheme, so a
		// leftover INSECURE=true would send to an https:// endpoint in
		// clear text). The URL is the one the exporter resolves from
		// the variables; WithEndpointURL changes nothing else.
		s.override = s.endpoint
	}
	s.plaintext = s.isPlaintext()
	return s, checkTLSFiles(s)
}

// checkTLSFiles fails on a certificate variable, of those the signal's
// exporter uses, whose file cannot be used: one that cannot be read, a CA
// file without a PEM certificate, a client certificate and key that do not
// load as a pair. The exporters only log such a file, at a verbosity
// nobody sees, and go on without it: every export then fails at the TLS
// handshake (the server's certificate "signed by unknown authority", or
// the server asking for a client certificate), blamed on a variable that
// is set. A plaintext connection uses no certificate, so its files are not
// read (a cluster-wide CA variable may name a file this host lacks).
func checkTLSFiles(s selection) error {
	if s.plaintext {
		return nil
	}
	if k, v := signalEnv(s.suffix, "CERTIFICATE"); v != "" {
		b, err := readTLSFile(v)
		if err != nil {
			return &ConfigError{Name: k, Value: v, Reason: "the CA certificate file cannot be read", Err: err}
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return &ConfigError{Name: k, Value: v, Reason: "the file holds no PEM certificate"}
		}
	}
	// As the exporters pick the pair: the signal's own when both of its
	// variables are set, else the general one's (checkClientCert warns
	// about a half-set pair).
	for _, p := range []string{"OTEL_EXPORTER_OTLP_" + s.suffix + "_", "OTEL_EXPORTER_OTLP_"} {
		cert, key := getenvTrim(p+"CLIENT_CERTIFICATE"), getenvTrim(p+"CLIENT_KEY")
		if cert == "" || key == "" {
			continue
		}
		if err := checkKeyPair(cert, key); err != nil {
			return &ConfigError{Name: p + "CLIENT_CERTIFICATE", Value: cert,
				Reason: "with " + p + "CLIENT_KEY, not a client certificate and key", Err: err}
		}
		break
	}
	return nil
}

// maxTLSFile bounds what is read of a certificate or key file: a CA
// bundle is some hundred KiB, and a device named by mistake (/dev/zero)
// must not grow the process until the kernel kills it.
const maxTLSFile = 16 << 20

// readTLSFile reads a certificate or key file of at most maxTLSFile bytes.
func readTLSFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTLSFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTLSFile {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxTLSFile>>20)
	}
	return b, nil
}

// checkKeyPair is tls.LoadX509KeyPair on files read by readTLSFile.
func checkKeyPair(certFile, keyFile string) error {
	cert, err := readTLSFile(certFile)
	if err != nil {
		return err
	}
	key, err := readTLSFile(keyFile)
	if err != nil {
		return err
	}
	_, err = tls.X509KeyPair(cert, key)
	return err
}

// exactExporterName fails on an exporter name autoexport would not find
// although it names one of its own: autoexport reads the variable itself
// and matches names exactly, so Console or " prometheus " would fail as
// unknown, with a message showing the name it wants. (otlp and none,
// which Setup handles, are matched in any case, as the specification has
// enum values.)
func exactExporterName(key, signal string) error {
	raw := os.Getenv(key)
	name := strings.TrimSpace(raw)
	builtin := []string{"console"}
	if signal == "metrics" {
		builtin = append(builtin, "prometheus")
	}
	for _, b := range builtin {
		if raw != b && strings.EqualFold(name, b) {
			return &ConfigError{Name: key, Value: raw, Reason: "write " + strconv.Quote(b) + ": autoexport matches exporter names exactly (lower case, no spaces)"}
		}
	}
	if raw != name {
		return &ConfigError{Name: key, Value: raw, Reason: "write " + strconv.Quote(name) + ": autoexport matches exporter names exactly (no spaces)"}
	}
	return nil
}

// checkEndpoints fails on an endpoint variable that is not a URL, such as
// a bare 127.0.0.1:4317: the Go exporters only log that they cannot parse
// it and send to their default, localhost:4317 over TLS, while every
// message would name the address the user set. For OTLP/HTTP the
// specification wants an http or https URL with a host: the exporters
// read collector:4318 as a URL of scheme "collector" and no host, and send
// nowhere. (For gRPC, collector:4317 is a target grpc-go takes, over TLS
// unless OTEL_EXPORTER_OTLP_INSECURE=true, as the specification allows.)
// Only the variable the signal uses is checked: a per-signal endpoint
// replaces the general one, which may be another signal's gRPC target.
func checkEndpoints(suffix, protocol string) error {
	const want = "write http://HOST:PORT for plaintext, https://HOST:PORT for TLS"
	k, v := signalEnv(suffix, "ENDPOINT")
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return &ConfigError{Name: k, Value: v, Reason: "not a URL: " + want}
	}
	if protocol != "grpc" && ((u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return &ConfigError{Name: k, Value: v, Reason: "OTLP/HTTP takes an http or https URL: " + want}
	}
	if port := endpointPort(u, v); !portOK(port) {
		// Taken, every export would fail at its dial.
		return &ConfigError{Name: k, Value: v, Reason: "port " + port + " is not 1-65535: " + want}
	}
	if sentURL(u) != u {
		// Not shown: these often carry a credential.
		otel.Handle(fmt.Errorf("otelconf: %s: the URL's user info, query or fragment is not sent (the Go OTLP exporters send to its host and path only); a credential goes in OTEL_EXPORTER_OTLP_HEADERS", k))
	}
	return nil
}

// endpointPort is the port endpoint v (parsed as u) names: an http(s)
// URL's, or a gRPC target's host:port; "" when it names none.
func endpointPort(u *url.URL, v string) string {
	if u.Scheme == "http" || u.Scheme == "https" {
		return u.Port()
	}
	if _, port, err := net.SplitHostPort(v); err == nil {
		return port
	}
	return ""
}

// portOK reports whether an endpoint's port is one a dial can reach, or
// none is given.
func portOK(port string) bool {
	n, err := strconv.Atoi(port)
	return port == "" || err == nil && n >= 1 && n <= 65535
}

// sentURL is u without what the OTLP exporters do not send, when it is an
// http(s) URL that has any of it: its user info, query and fragment. Such
// parts often carry a credential, which status lines and export errors
// would otherwise show. u itself when there is nothing to remove.
func sentURL(u *url.URL) *url.URL {
	if u.Scheme != "http" && u.Scheme != "https" || u.User == nil && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery {
		return u
	}
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return &c
}

// shownURL is endpoint v as messages show it: without what the exporters
// do not send (sentURL) when it is such a URL, else as it is.
func shownURL(v string) string {
	if u, err := url.Parse(v); err == nil {
		if sent := sentURL(u); sent != u {
			return sent.String()
		}
	}
	return v
}

// getenvTrim is the variable without surrounding spaces, as the OTLP
// exporters read it: blank is unset.
func getenvTrim(k string) string { return strings.TrimSpace(os.Getenv(k)) }

// specDefaultEndpoint is the OTLP endpoint the specification names for
// protocol when no endpoint variable is set.
func specDefaultEndpoint(protocol, signal string) string {
	if protocol == "grpc" {
		return "http://localhost:4317"
	}
	return "http://localhost:4318/v1/" + signal
}

// otlpProtocol is the per-signal protocol variable, else the general one,
// else DefaultProtocol.
func otlpProtocol(suffix string) (string, error) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.TrimSpace(os.Getenv(k))
		switch strings.ToLower(v) {
		case "":
			continue
		case "grpc", "http/protobuf":
			return strings.ToLower(v), nil
		case "http/json":
			return "", &ConfigError{Name: k, Value: v, Reason: "llmtrace sends grpc or http/protobuf only: its span encoder writes protobuf, and the Go OTLP metric exporters have no JSON"}
		default:
			return "", &ConfigError{Name: k, Value: v, Reason: "want grpc or http/protobuf"}
		}
	}
	return DefaultProtocol, nil
}

// defaultOTLPTimeout is the specification's OTEL_EXPORTER_OTLP_TIMEOUT.
const defaultOTLPTimeout = 10 * time.Second

// otlpTimeout reads the per-signal timeout variable, else the general one,
// as the specification's Timeout type: a negative or unparsable value is
// warned about and ignored, 0 is no timeout, and milliseconds past
// time.Duration are the longest one. set is false when neither variable is
// set; otherwise the timeout goes to the exporter in code, over its own
// reading, which took a negative value (or one that wrapped negative) as
// no timeout at all.
func otlpTimeout(suffix string) (d time.Duration, set bool) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		v := getenvTrim(k)
		if v == "" {
			continue
		}
		set = true
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			otel.Handle(fmt.Errorf("otelconf: %s=%q is not a non-negative integer of milliseconds; ignored", k, v))
			continue
		}
		return millis(n), true
	}
	if set {
		return defaultOTLPTimeout, true
	}
	return 0, false
}

// checkInsecure warns about an OTEL_EXPORTER_OTLP_INSECURE (or per-signal)
// value neither true nor false, as the specification wants for a boolean:
// the exporters read it as false without a word, so a 1 or yes meant to
// turn TLS off leaves it on.
func checkInsecure(suffix string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"} {
		if v := getenvTrim(k); v != "" && !strings.EqualFold(v, "true") && !strings.EqualFold(v, "false") {
			otel.Handle(fmt.Errorf("otelconf: %s=%q is neither true nor false; read as false (TLS, for a target without http://)", k, v))
		}
	}
}

// checkClientCert warns about a client certificate variable set without
// its key, or the reverse: the exporters read a pair only when both are
// set and ignore it otherwise, without a word, so an mTLS backend refuses
// every export at the handshake.
func checkClientCert(suffix string) {
	for _, p := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_", "OTEL_EXPORTER_OTLP_"} {
		set, unset := p+"CLIENT_CERTIFICATE", p+"CLIENT_KEY"
		if getenvTrim(set) == "" {
			set, unset = unset, set
		}
		if getenvTrim(set) != "" && getenvTrim(unset) == "" {
			otel.Handle(fmt.Errorf("otelconf: %s is set but %s is not: the exporters ignore both, and send no client certificate from them", set, unset))
		}
	}
}

// checkHeaders warns about the entries of the headers variable the signal
// uses (a per-signal one replaces the general one) that the exporters drop:
// no "=", a key that is not an HTTP token, a broken percent encoding. They
// log only "parse headers", without the variable, and the entry with it;
// the warning names the entry by its place or key, never its value, which
// is often a credential.
//
// An entry the exporters keep but cannot send fails the start instead
// (a ConfigError, its value left out): every export would fail on it, and
// every span be lost, with an error naming neither the variable nor the
// cause. A value decoded to a control character (%0A) is no header value
// over either protocol; over gRPC a key must be of [0-9a-z-_.] once lower
// cased, and a value printable ASCII unless the key ends in -bin.
func checkHeaders(suffix, protocol string) error {
	k, v := signalEnv(suffix, "HEADERS")
	if v == "" {
		return nil
	}
	for i, entry := range strings.Split(v, ",") {
		key, val, ok := strings.Cut(entry, "=")
		key = strings.TrimSpace(key)
		dec, err := url.PathUnescape(val)
		var why string
		switch {
		case !ok:
			why = fmt.Sprintf("entry %d has no '='", i+1)
		case !isToken(key):
			why = fmt.Sprintf("entry %d: %q is not a header name", i+1, key)
		case err != nil:
			why = fmt.Sprintf("%q: the value's percent encoding is broken", key)
		default:
			if reason := unsendableHeader(key, strings.TrimSpace(dec), protocol); reason != "" {
				return &ConfigError{Name: k, Value: key + "=…", Reason: reason + ": every export would fail on it"}
			}
			continue
		}
		otel.Handle(fmt.Errorf("otelconf: %s: %s; that header is not sent", k, why))
	}
	return nil
}

// unsendableHeader says why the exporter of protocol cannot send the header
// key: value (a token, and the value percent-decoded and trimmed, as the
// exporters read them), or "" when it can: what net/http and grpc-go
// refuse at each export.
func unsendableHeader(key, value, protocol string) string {
	if protocol == "grpc" {
		for _, c := range strings.ToLower(key) {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '_' || c == '.') {
				return "a gRPC metadata key takes only 0-9, a-z, '-', '_' and '.'"
			}
		}
		if strings.HasSuffix(strings.ToLower(key), "-bin") {
			return "" // binary metadata: any bytes
		}
		for i := 0; i < len(value); i++ {
			if value[i] < 0x20 || value[i] > 0x7e {
				return "the value, percent-decoded, is not printable ASCII, as a gRPC metadata value must be (a key ending in -bin takes any bytes)"
			}
		}
		return ""
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "the value, percent-decoded, holds a control character"
		}
	}
	return ""
}

// isToken reports whether s is an HTTP token (RFC 9110), as the exporters
// want a header name.
func isToken(s string) bool {
	for _, c := range s {
		if !(c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c))) {
			return false
		}
	}
	return s != ""
}

// otlpCompression reads the per-signal compression variable, else the
// general one, as the specification's enum: gzip or none in any case; a
// value not recognised is warned about and ignored. Its answer goes to the
// exporter in code: the exporter's own reading compressed only for the
// exact "gzip" and took any other value as none without a word.
func otlpCompression(suffix string) (gzip bool) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_" + suffix + "_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"} {
		v := getenvTrim(k)
		switch strings.ToLower(v) {
		case "":
			continue
		case "gzip":
			return true
		case "none":
			return false
		}
		otel.Handle(fmt.Errorf("otelconf: %s=%q: want gzip or none; ignored", k, v))
	}
	return false
}

// otlpEndpoint is where the OTLP exporter will send, resolved as the
// exporters do, for messages only (the exporters read the variables
// themselves).
func otlpEndpoint(suffix, protocol, signal string) string {
	// Each URL without what the exporters do not send (sentURL).
	if v := getenvTrim("OTEL_EXPORTER_OTLP_" + suffix + "_ENDPOINT"); v != "" {
		return shownURL(v) // used as is, path included, by both exporters
	}
	v := getenvTrim("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch {
	case v == "":
		return specDefaultEndpoint(protocol, signal)
	case protocol == "grpc":
		return shownURL(v)
	}
	// As the HTTP exporters build it: the signal's path joined to the
	// base URL's.
	if u, err := url.Parse(v); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		u = sentURL(u)
		u.Path = path.Join(u.Path, "/v1/"+signal)
		u.RawPath = ""
		return u.String()
	}
	return strings.TrimSuffix(v, "/") + "/v1/" + signal
}

// overrideURL turns Config.TracesEndpoint (a URL, or host:port meaning
// plaintext) into the URL the exporter's WithEndpointURL takes: for
// http/protobuf, with the signal's path when the URL has none.
func overrideURL(ep, protocol, signal string) (string, error) {
	orig := ep
	if !strings.Contains(ep, "://") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return "", &ConfigError{Name: "Config.TracesEndpoint", Value: ep, Reason: "want host:port or an http(s) URL"}
		}
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", &ConfigError{Name: "Config.TracesEndpoint", Value: orig, Reason: "want host:port or an http(s) URL"}
	}
	if !portOK(u.Port()) {
		return "", &ConfigError{Name: "Config.TracesEndpoint", Value: orig, Reason: "port " + u.Port() + " is not 1-65535"}
	}
	if protocol != "grpc" && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/" + signal
	}
	return u.String(), nil
}

// checkHistogramAggregation reports a value of
// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION the OTLP
// exporters would ignore without a word.
func checkHistogramAggregation() {
	checkEnum("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "ignored",
		"explicit_bucket_histogram", "base2_exponential_bucket_histogram")
}

// checkTemporality reports a value of
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE the OTLP exporters
// would ignore, logging it only at a verbosity nobody sees.
func checkTemporality() {
	checkEnum("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "cumulative applies", "cumulative", "delta", "lowmemory")
}

// checkEnum warns about a value of the enum variable k that is none of
// values in any case (the specification wants a warning for an enum value
// not recognised, and the SDK ignores one without a word); then says what
// applies instead.
func checkEnum(k, then string, values ...string) {
	v := strings.TrimSpace(os.Getenv(k))
	if v == "" || slices.Contains(values, strings.ToLower(v)) {
		return
	}
	want := strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
	otel.Handle(fmt.Errorf("otelconf: %s=%q: want %s; %s", k, v, want, then))
}

// exemplarsOff reports whether OTEL_METRICS_EXEMPLAR_FILTER is always_off,
// read as the SDK reads it (any case, spaces trimmed). The SDK's
// instruments then record no exemplars, but the Aggregator attaches one
// per bucket whatever the variable says, so Setup leaves it out, as for
// delta temporality: the tracker's histograms go through the instruments,
// which follow the filter.
func exemplarsOff() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_METRICS_EXEMPLAR_FILTER")), "always_off")
}

// checkExemplarFilter reports a value of OTEL_METRICS_EXEMPLAR_FILTER the
// SDK ignores without a word.
func checkExemplarFilter() {
	checkEnum("OTEL_METRICS_EXEMPLAR_FILTER", "trace_based applies", "always_on", "always_off", "trace_based")
}

// exponentialHistograms reports whether the OTLP metric exporter is asked
// for base2 exponential histograms. The Aggregator keeps explicit buckets,
// so Setup then leaves it out and the tracker's histograms go through the
// SDK's instruments, which follow the reader's aggregation: what the user
// asked for, at the instruments' cost (BENCHMARKS.md: the tracker's
// WithAggregator fast path).
func exponentialHistograms() bool {
	v := os.Getenv("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION")
	return strings.EqualFold(strings.TrimSpace(v), "base2_exponential_bucket_histogram")
}

// deltaTemporality reports whether the OTLP metric exporter is asked for
// delta temporality (lowmemory is delta for counters and histograms). The
// Aggregator's counters and histograms are cumulative only, so Setup then
// leaves it out, as for exponential histograms: the tracker's metrics
// follow the preference through the SDK's instruments, at their cost,
// rather than arrive cumulative among delta ones, which a delta-only
// backend refuses.
func deltaTemporality() bool {
	v := os.Getenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE")
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "delta", "lowmemory":
		return true
	}
	return false
}

// checkProducers refuses OTEL_METRICS_PRODUCERS: autoexport would put its
// producers in the place of the Aggregator, whose latency histograms would
// then be missing from every reader. A blank value is refused too for the
// readers autoexport builds (all but otlp): autoexport reads it untrimmed,
// as a producer name it does not know, and its error blamed the exporter.
func checkProducers(exporter string) error {
	const k = "OTEL_METRICS_PRODUCERS"
	raw := os.Getenv(k)
	if v := strings.TrimSpace(raw); v != "" {
		return &ConfigError{Name: k, Value: v,
			Reason: "not supported: llmtrace's own producer serves its latency histograms on every reader; unset it"}
	}
	if raw != "" && exporter != "otlp" {
		return &ConfigError{Name: k, Value: raw, Reason: "blank, but autoexport reads it as a producer name; unset it"}
	}
	return nil
}

// trackerOptions reads the tracker's configuration from the environment;
// disabled is OTEL_SDK_DISABLED=true.
func trackerOptions(disabled bool) ([]otelstats.Option, error) {
	var opts []otelstats.Option
	if v := strings.TrimSpace(os.Getenv(EnvSampling)); v != "" {
		pol, err := otelstats.ParseSamplingPolicy(v)
		if err != nil {
			return nil, &ConfigError{Name: EnvSampling, Value: v, Reason: "not a sampling policy", Err: err}
		}
		opts = append(opts, otelstats.WithSampling(pol))
	}
	head, err := headSampler(disabled)
	if err != nil {
		return nil, err
	}
	if head != nil {
		opts = append(opts, otelstats.WithHeadSampler(head))
	}
	if v := strings.TrimSpace(os.Getenv(EnvDetail)); v != "" {
		d, err := otelstats.ParseDetail(v)
		if err != nil {
			return nil, &ConfigError{Name: EnvDetail, Value: v, Reason: "not a detail level", Err: err}
		}
		opts = append(opts, otelstats.WithDetail(d))
	}
	if v := strings.TrimSpace(os.Getenv(EnvCaptureContent)); v != "" {
		// As the specification reads booleans: anything but true is
		// false, and a value neither true nor false is reported.
		on := strings.EqualFold(v, "true")
		if !on && !strings.EqualFold(v, "false") {
			otel.Handle(fmt.Errorf("otelconf: %s=%q is neither true nor false; content is not captured", EnvCaptureContent, v))
		}
		if on {
			opts = append(opts, otelstats.WithContentCapture(&otelstats.ContentCapture{}))
		}
	}
	return opts, nil
}

// BatchConfig is the batch processor's configuration as Setup applied it:
// OTEL_BSP_* where set, the batch package's defaults elsewhere.
type BatchConfig struct {
	MaxQueueSize, MaxExportBatchSize int
	BatchTimeout, ExportTimeout      time.Duration
}

// String names each setting by its variable, in the variable's unit, e.g.
// "OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024
// OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000".
func (c BatchConfig) String() string {
	return fmt.Sprintf("OTEL_BSP_MAX_QUEUE_SIZE=%d OTEL_BSP_MAX_EXPORT_BATCH_SIZE=%d OTEL_BSP_SCHEDULE_DELAY=%d OTEL_BSP_EXPORT_TIMEOUT=%d",
		c.MaxQueueSize, c.MaxExportBatchSize, c.BatchTimeout.Milliseconds(), exportTimeoutMs(c.ExportTimeout))
}

// exportTimeoutMs is the timeout as OTEL_BSP_EXPORT_TIMEOUT writes it: 0
// for none.
func exportTimeoutMs(d time.Duration) int64 {
	if d == noTimeout {
		return 0
	}
	return d.Milliseconds()
}

// noTimeout is OTEL_BSP_EXPORT_TIMEOUT=0: the specification reads a
// timeout of zero as none, and the processor takes a duration.
const noTimeout = time.Duration(math.MaxInt64)

// batchConfig reads the standard OTEL_BSP_* variables (milliseconds and
// counts); a size that is not a positive integer, or a delay or timeout
// that is not a non-negative one, is reported and the default kept.
func batchConfig() BatchConfig {
	c := BatchConfig{
		MaxQueueSize: batch.DefaultMaxQueueSize, MaxExportBatchSize: batch.DefaultMaxExportBatchSize,
		BatchTimeout: batch.DefaultBatchTimeout, ExportTimeout: batch.DefaultExportTimeout,
	}
	// least and most bound the value a variable takes: a size must be
	// positive; a delay or timeout may be 0 (the specification's
	// durations, and a timeout of 0 is no timeout). A queue is allocated
	// whole, so past batch.MaxQueueSizeLimit it is out of range, as the
	// specification reads a value it cannot use.
	num := func(name string, into *int, least, most int) {
		v := strings.TrimSpace(os.Getenv(name))
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < least || n > most {
			otel.Handle(fmt.Errorf("otelconf: %s=%q is not an integer from %d to %d; the default applies", name, v, least, most))
			return
		}
		*into = n
	}
	ms := func(name string, into *time.Duration) {
		n := int(into.Milliseconds())
		num(name, &n, 0, math.MaxInt)
		*into = millis(n)
	}
	num("OTEL_BSP_MAX_QUEUE_SIZE", &c.MaxQueueSize, 1, batch.MaxQueueSizeLimit)
	// A batch is cut to the queue below, so any positive size will do.
	num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.MaxExportBatchSize, 1, math.MaxInt)
	ms("OTEL_BSP_SCHEDULE_DELAY", &c.BatchTimeout)
	ms("OTEL_BSP_EXPORT_TIMEOUT", &c.ExportTimeout)
	if c.ExportTimeout == 0 {
		c.ExportTimeout = noTimeout
	}
	// As the processor does, and as the specification says.
	c.MaxExportBatchSize = min(c.MaxExportBatchSize, c.MaxQueueSize)
	return c
}

// millis is n milliseconds, the longest time.Duration when n is more
// (292 years, "a very long time" to the specification): the product would
// wrap to a negative duration.
func millis(n int) time.Duration {
	if n > math.MaxInt64/int(time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(n) * time.Millisecond
}

func (c BatchConfig) options() []batch.Option {
	return []batch.Option{
		batch.WithMaxQueueSize(c.MaxQueueSize), batch.WithMaxExportBatchSize(c.MaxExportBatchSize),
		batch.WithBatchTimeout(c.BatchTimeout), batch.WithExportTimeout(c.ExportTimeout),
	}
}

// exporterError is autoexport's error for the exporter name in key: a
// ConfigError when the name is unknown, the error itself otherwise (a
// Prometheus port already taken).
func exporterError(key, name, want string, err error) error {
	if strings.Contains(err.Error(), "unknown exporter") {
		return &ConfigError{Name: key, Value: name, Reason: "want " + want, Err: err}
	}
	return fmt.Errorf("otelconf: %s=%s: %w", key, name, err)
}
