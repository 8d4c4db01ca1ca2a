//go:build unix

package openaihttp_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/openaihttp"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
)

// The side-by-side benchmark (BENCHMARKS.md, "The proxy beside
// httputil.ReverseProxy"): streamed chat completions of 16 tokens from the
// toy server of examples/httpserver, over loopback TCP, alternating between
// a direct connection, httputil.ReverseProxy flushing every write (what a
// user would put there instead), the same ReverseProxy in otelhttp's
// handler and transport exporting through the SDK (the naive OpenTelemetry
// twin) and openaihttp's Proxy. Each proxy runs in
// a process of its own — this test binary again, started by the benchmark —
// so that its CPU time (getrusage) and allocations are its own, not the
// client's, the upstream's or the OTLP receiver's.
//
//	go test -run='^$' -bench=BenchmarkSideBySide -benchtime=600x ./openaihttp

// Environment of a proxy process started by the benchmark.
const (
	sbsModeEnv     = "OPENAIHTTP_SBS_PROXY"    // "reverseproxy", "otelhttp" or "llmtrace"
	sbsUpstreamEnv = "OPENAIHTTP_SBS_UPSTREAM" // the toy server's URL
	// sbsProfileEnv, when set in the benchmark's environment, makes each
	// llmtrace proxy process write a CPU profile to this path (suffixed
	// with the sub-benchmark), for `go tool pprof`.
	sbsProfileEnv = "OPENAIHTTP_SBS_CPUPROFILE"
	// sbsMemProfileEnv does the same for an allocation profile, sampling
	// one in 512 bytes (the CPU figures of such a run are not the
	// proxy's own: sampling that often costs CPU).
	sbsMemProfileEnv = "OPENAIHTTP_SBS_MEMPROFILE"
	// sbsTraceEnv does the same for an execution trace (`go tool trace`),
	// suffixed with the export mode and the proxy: where goroutines wake
	// one another, which a CPU profile does not show.
	sbsTraceEnv = "OPENAIHTTP_SBS_TRACE"
	// sbsEnvEnv adds comma-separated VAR=value settings to the llmtrace
	// proxy's environment in export=otlp (e.g. OTEL_METRICS_EXPORTER=none).
	sbsEnvEnv = "OPENAIHTTP_SBS_ENV"
)

func init() { benchChild = sbsChild }

// sbsChild runs a proxy process when the environment asks for one.
func sbsChild() (int, bool) {
	mode := os.Getenv(sbsModeEnv)
	if mode == "" {
		return 0, false
	}
	if err := sbsServe(mode, os.Getenv(sbsUpstreamEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "proxy process:", err)
		return 1, true
	}
	return 0, true
}

// sbsServe serves one proxy on a free loopback port, prints "listening
// ADDR", answers each "stats" line on stdin with its process's CPU time and
// allocations, and shuts down (exporting what it holds) when stdin closes.
func sbsServe(mode, upstream string) error {
	up, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	ctx := context.Background()
	transport := openaihttp.NewTransport(openaihttp.TransportConfig{})
	var h http.Handler
	stop := func() error { return nil }
	switch mode {
	case "reverseproxy":
		h = reverseProxy(up, transport)
	case "otelhttp":
		var err error
		if h, stop, err = newOtelhttpProxy(ctx, up, transport); err != nil {
			return err
		}
	case "llmtrace":
		p, _, shutdown, err := newTracingProxy(ctx, up, transport)
		if err != nil {
			return err
		}
		h, stop = p, shutdown
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	if path := os.Getenv(sbsProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if path := os.Getenv(sbsTraceEnv); path != "" {
		f, err := os.Create(path + "." + mode)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			return err
		}
		defer func() { trace.Stop(); _ = f.Close() }()
	}
	if path := os.Getenv(sbsMemProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		runtime.MemProfileRate = 512
		defer func() { _ = pprof.Lookup("allocs").WriteTo(f, 0); _ = f.Close() }()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	fmt.Printf("listening %s\n", l.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "stats" {
			fmt.Println(sbsStats())
		}
	}
	_ = srv.Shutdown(ctx)
	transport.CloseIdleConnections()
	err = stop()
	fmt.Println("exported")
	return err
}

// reverseProxy is httputil.ReverseProxy as a user would put it before a
// streaming server: flushing every write.
func reverseProxy(up *url.URL, transport http.RoundTripper) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.FlushInterval = -1
	rp.Transport = transport
	// Without full duplex an HTTP/1 server closes the request body once
	// the response begins, and the transport, still reading it for the
	// upstream (which may answer before it read the body's end, as the toy
	// server does), fails the connection under the response: about one
	// stream in a hundred is cut short. openaihttp's Proxy does the same.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
}

// newOtelhttpProxy is the naive OpenTelemetry twin: the same ReverseProxy
// in otelhttp's handler and transport (a server and a client span and the
// HTTP duration metrics a request), with the SDK set up from the
// environment as its documentation shows — autoexport's exporter behind the
// SDK's batch span processor, its metric reader — and so the SDK's OTLP
// encoding. With OTEL_SDK_DISABLED=true otelhttp runs on the no-op
// providers.
func newOtelhttpProxy(ctx context.Context, up *url.URL, transport http.RoundTripper) (http.Handler, func() error, error) {
	var opts []otelhttp.Option
	stop := func() error { return nil }
	if os.Getenv("OTEL_SDK_DISABLED") != "true" {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, nil, err
		}
		reader, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, nil, errors.Join(err, exp.Shutdown(ctx))
		}
		res := resource.NewSchemaless(attribute.String("service.name", "otelhttp-proxy"))
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
		opts = []otelhttp.Option{otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp),
			otelhttp.WithPropagators(propagation.TraceContext{})}
		stop = func() error { return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)) }
	}
	rp := reverseProxy(up, otelhttp.NewTransport(transport, opts...))
	return otelhttp.NewHandler(rp, "proxy", opts...), stop, nil
}

// newTracingProxy is the llmtrace proxy as `llmtrace proxy` and the README
// set it up, configured from the environment; stop shuts its tracker and
// providers down, exporting what they hold.
func newTracingProxy(ctx context.Context, up *url.URL, transport http.RoundTripper) (*openaihttp.Proxy, *otelconf.Providers, func() error, error) {
	prov, err := otelconf.Setup(ctx, otelconf.Config{ServiceName: "llmtrace-proxy"})
	if err != nil {
		return nil, nil, nil, err
	}
	tracker, err := otelstats.NewTracker(append(prov.TrackerOptions(), otelstats.WithAutoSweep(time.Second),
		otelstats.WithModels("toy", openaihttp.UnknownModel))...)
	if err != nil {
		return nil, nil, nil, errors.Join(err, prov.Shutdown(ctx))
	}
	stop := func() error { return errors.Join(tracker.Shutdown(ctx), prov.Shutdown(ctx)) }
	opts := []openaihttp.Option{openaihttp.WithTracerProvider(prov.TracerProvider),
		openaihttp.WithMeterProvider(prov.MeterProvider), openaihttp.WithTransport(transport)}
	if sp, res, ok := prov.SpanExport(); ok {
		opts = append(opts, openaihttp.WithSpanProcessor(sp), openaihttp.WithResource(res))
	}
	p, err := openaihttp.NewProxy(up, tracker, opts...)
	if err != nil {
		return nil, nil, nil, errors.Join(err, stop())
	}
	return p, prov, stop, nil
}

// sbsStats is the process's CPU time (user + system, ns), allocations,
// bytes allocated, context switches and page faults so far.
func sbsStats() string {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return fmt.Sprintf("stats %d %d %d %d %d", ru.Utime.Nano()+ru.Stime.Nano(), ms.Mallocs, ms.TotalAlloc, ru.Nvcsw+ru.Nivcsw, ru.Minflt)
}

// sbsProcess is a proxy process the benchmark drives.
type sbsProcess struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string
}

type sbsCounters struct{ cpu, mallocs, bytes, switches, faults int64 }

func (c sbsCounters) sub(d sbsCounters) sbsCounters {
	return sbsCounters{c.cpu - d.cpu, c.mallocs - d.mallocs, c.bytes - d.bytes, c.switches - d.switches, c.faults - d.faults}
}

func startSBSProcess(b *testing.B, mode, upstream string, env []string) *sbsProcess {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(sbsEnviron(), append(env, sbsModeEnv+"="+mode, sbsUpstreamEnv+"="+upstream)...)
	cmd.Stderr = os.Stderr
	p := &sbsProcess{cmd: cmd}
	if p.in, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.stop(b) })
	p.out = bufio.NewScanner(stdout)
	line := p.line(b)
	if p.addr = strings.TrimPrefix(line, "listening "); p.addr == line {
		b.Fatalf("%s proxy process: %q", mode, line)
	}
	return p
}

// sbsEnviron is the benchmark's environment without the OpenTelemetry and
// llmtrace variables, which each process gets as its mode says.
func sbsEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "LLMTRACE_") && !strings.HasPrefix(kv, "OPENAIHTTP_SBS_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *sbsProcess) line(b *testing.B) string {
	b.Helper()
	if !p.out.Scan() {
		b.Fatalf("proxy process ended: %v", p.out.Err())
	}
	return p.out.Text()
}

// sample reads the process's counters.
func (p *sbsProcess) sample(b *testing.B) sbsCounters {
	b.Helper()
	if _, err := io.WriteString(p.in, "stats\n"); err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(p.line(b))
	if len(f) != 6 || f[0] != "stats" {
		b.Fatalf("proxy process said %q", f)
	}
	var c sbsCounters
	for i, dst := range []*int64{&c.cpu, &c.mallocs, &c.bytes, &c.switches, &c.faults} {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		*dst = v
	}
	return c
}

// stop closes the process's stdin, so it shuts down and exports what it
// holds, and waits for it.
func (p *sbsProcess) stop(b *testing.B) {
	if p.in == nil {
		return
	}
	_ = p.in.Close()
	p.in = nil
	for p.out.Scan() {
	}
	if err := p.cmd.Wait(); err != nil {
		b.Errorf("proxy process: %v", err)
	}
}

// otlpReceiver is an OTLP/HTTP receiver counting the spans it gets; metrics
// are read and acknowledged.
type otlpReceiver struct {
	spans, metricExports atomic.Int64
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch req.URL.Path {
	case "/v1/traces":
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans.Add(int64(len(ss.Spans)))
			}
		}
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	case "/v1/metrics":
		r.metricExports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	default:
		http.NotFound(w, req)
	}
}

// sbsBody asks for 16 tokens: the toy engine's natural length for seed 3
// is 36, so max_tokens ends it.
const sbsBody = `{"model":"toy","stream":true,"max_tokens":16,"seed":3,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell me about tracing a serving stack."}]}`

// sbsTokens is the content chunks each request must get.
const sbsTokens = 16

// streamOnce sends one streamed chat completion to base and returns its
// time to first content chunk, checking the stream is whole.
func streamOnce(client *http.Client, base string) (time.Duration, error) {
	start := time.Now()
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(sbsBody))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	var ttft time.Duration
	chunks, done := 0, false
	for {
		line, err := r.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data: ")) {
			switch {
			case bytes.HasPrefix(line, []byte("data: [DONE]")):
				done = true
			case bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`)):
				if chunks == 0 {
					ttft = time.Since(start)
				}
				chunks++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if chunks != sbsTokens || !done {
		return 0, fmt.Errorf("%d content chunks, [DONE] %v; want %d and [DONE]", chunks, done, sbsTokens)
	}
	return ttft, nil
}

// sbsMode is one way to reach the upstream, with what it measured.
type sbsMode struct {
	name    string
	base    string
	proc    *sbsProcess   // nil: direct
	rec     *otlpReceiver // what a tracing proxy exported; nil for the others
	client  *http.Client
	streams int // requests at once

	ttft     []time.Duration // every measured request's
	roundP50 []float64       // µs, per round
	roundCPU []float64       // µs of the proxy's CPU per request, per round
	// total is what the proxy process spent from the first measured round
	// to the end of the last, the other modes' rounds included, requests
	// the requests it served meanwhile. Not a median of its rounds, nor a
	// sum of them: the batch processor exports every 1,024 spans or every
	// second, so most rounds hold no export and an export may come during
	// another mode's round; what the process spends while the others run
	// is spent for its own requests.
	total    sbsCounters
	requests int
}

// round sends n requests one after the other and records them.
func (m *sbsMode) round(b *testing.B, n int, measure bool) {
	b.Helper()
	var before sbsCounters
	if m.proc != nil && measure {
		before = m.proc.sample(b)
	}
	ttfts, err := streams(m.client, m.base, n, m.streams)
	if err != nil {
		b.Fatalf("%s: %v", m.name, err)
	}
	if !measure {
		return
	}
	m.ttft = append(m.ttft, ttfts...)
	m.roundP50 = append(m.roundP50, us(percentile(ttfts, 50)))
	if m.proc != nil {
		d := m.proc.sample(b).sub(before)
		m.roundCPU = append(m.roundCPU, float64(d.cpu)/1e3/float64(n))
	}
}

// perRequest is the proxy's CPU time (µs), allocations, bytes, context
// switches and page faults per measured request.
func (m *sbsMode) perRequest() (cpu, allocs, bytes, switches, faults float64) {
	n := float64(max(m.requests, 1))
	return float64(m.total.cpu) / 1e3 / n, float64(m.total.mallocs) / n, float64(m.total.bytes) / n,
		float64(m.total.switches) / n, float64(m.total.faults) / n
}

// streams sends n requests, k at a time, and returns their TTFTs.
func streams(client *http.Client, base string, n, k int) ([]time.Duration, error) {
	var (
		mu    sync.Mutex
		ttfts = make([]time.Duration, 0, n)
		first error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range min(k, n) {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				ttft, err := streamOnce(client, base)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				ttfts = append(ttfts, ttft)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return ttfts, first
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sbsRound is how many requests per stream each mode sends before the
// next takes over: short enough that all four see the same machine.
const sbsRound = 25

// BenchmarkSideBySide: b.N streamed requests through each of direct,
// reverseproxy, otelhttp and llmtrace, in alternating rounds (each mode
// first in turn). streams=1 sends them one at a time, for the latency a proxy adds;
// streams=4 keeps four open at once, as an engine's batch does (one
// stream at a time, a proxy's CPU goes mostly to waking up), and
// streams=16 sixteen, a busier proxy whose code stays in the CPU's caches
// between requests. export=otlp has the two tracing proxies export traces
// and metrics over OTLP/HTTP to receivers in the benchmark's process
// (metrics every second); export=off runs them with OTEL_SDK_DISABLED=true.
// Reported: each mode's
// TTFT p50 (median of the rounds') and p99 (over all requests), each
// proxy process's CPU time, allocations, bytes, context switches and page
// faults per request (all it spent from the first measured round to the
// end of the last, over the requests it served), and the ratios of
// llmtrace (cpu-ratio) and of otelhttp (otelhttp-cpu-ratio) to
// reverseproxy.
// The benchmark fails if a stream is not whole or, exporting every trace,
// a tracing proxy's receiver got fewer spans than requests.
func BenchmarkSideBySide(b *testing.B) {
	for _, streams := range []int{1, 4, 16} {
		for _, export := range []string{"otlp", "off"} {
			b.Run(fmt.Sprintf("streams=%d/export=%s", streams, export), func(b *testing.B) { sideBySide(b, streams, export) })
		}
	}
}

func sideBySide(b *testing.B, streams int, export string) {
	upstream := httptest.NewServer(toyserver.New(toyserver.Config{
		Models: []string{"toy"}, Slots: 64, TokenDelay: time.Millisecond,
		PrefillBase: time.Millisecond, PrefillPerToken: time.Microsecond, Jitter: -1,
	}))
	defer upstream.Close()
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}}
	}
	modes := []*sbsMode{{name: "direct", base: upstream.URL, client: newClient(), streams: streams}}
	for _, name := range []string{"reverseproxy", "otelhttp", "llmtrace"} {
		m := &sbsMode{name: name, client: newClient(), streams: streams}
		var receiverURL string
		if name != "reverseproxy" {
			// Each tracing proxy exports to a receiver of its own, so each
			// count is its own.
			m.rec = &otlpReceiver{}
			receiver := httptest.NewServer(m.rec)
			defer receiver.Close()
			receiverURL = receiver.URL
		}
		m.proc = startSBSProcess(b, name, upstream.URL, sbsChildEnv(name, export, receiverURL))
		m.base = "http://" + m.proc.addr
		modes = append(modes, m)
	}
	// Warm up: connections open, caches and the GC's pacing settled.
	for _, m := range modes {
		m.round(b, min(b.N, 100), false)
	}
	start := make([]sbsCounters, len(modes))
	for i, m := range modes {
		if m.proc != nil {
			start[i] = m.proc.sample(b)
		}
	}
	b.ResetTimer()
	for r, left := 0, b.N; left > 0; r++ {
		n := min(left, sbsRound*streams)
		for i := range modes {
			modes[(r+i)%len(modes)].round(b, n, true)
		}
		left -= n
	}
	b.StopTimer()
	for i, m := range modes {
		m.client.CloseIdleConnections()
		if m.proc == nil {
			continue
		}
		m.total, m.requests = m.proc.sample(b).sub(start[i]), b.N
		m.proc.stop(b)
		// Every request's trace, once the process has shut down: the
		// server span at least.
		if export == "otlp" && m.rec != nil && everyTraceKept(sbsExtraEnv()) && m.rec.spans.Load() < int64(b.N) {
			b.Fatalf("%s: the receiver got %d spans for %d requests", m.name, m.rec.spans.Load(), b.N)
		}
	}
	sbsReport(b, modes)
}

// sbsExtraEnv is OPENAIHTTP_SBS_ENV's VAR=value settings (a value cannot
// hold a comma).
func sbsExtraEnv() []string {
	if extra := os.Getenv(sbsEnvEnv); extra != "" {
		return strings.Split(extra, ",")
	}
	return nil
}

// everyTraceKept reports whether the llmtrace proxy, with these extra
// settings, exports every request's trace: not when traces are off or
// sampled.
func everyTraceKept(extra []string) bool {
	for _, kv := range extra {
		if kv == "OTEL_TRACES_EXPORTER=none" || strings.HasPrefix(kv, "OTEL_TRACES_SAMPLER=") ||
			strings.HasPrefix(kv, "LLMTRACE_SAMPLING=") {
			return false
		}
	}
	return true
}

// sbsChildEnv is a proxy process's environment beside the benchmark's:
// the export, and the profiles and settings the benchmark's own
// environment asks for. The two tracing proxies get the same settings
// (otelhttp ignores the LLMTRACE_ ones).
func sbsChildEnv(mode, export, receiver string) []string {
	var env []string
	for _, name := range []string{sbsProfileEnv, sbsMemProfileEnv} {
		if path := os.Getenv(name); path != "" {
			env = append(env, name+"="+path+"."+export+"."+mode)
		}
	}
	if path := os.Getenv(sbsTraceEnv); path != "" {
		env = append(env, sbsTraceEnv+"="+path+"."+export)
	}
	if mode == "reverseproxy" {
		return env
	}
	if export == "off" {
		return append(env, "OTEL_SDK_DISABLED=true")
	}
	env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+receiver, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_METRIC_EXPORT_INTERVAL=1000")
	return append(env, sbsExtraEnv()...)
}

func sbsReport(b *testing.B, modes []*sbsMode) {
	direct, rp, naive, ours := modes[0], modes[1], modes[2], modes[3]
	for _, m := range modes {
		b.ReportMetric(median(m.roundP50), m.name+"-ttft-p50-us")
		b.ReportMetric(us(percentile(m.ttft, 99)), m.name+"-ttft-p99-us")
	}
	for _, m := range modes[1:] {
		cpu, allocs, _, _, faults := m.perRequest()
		b.ReportMetric(cpu, m.name+"-cpu-us/req")
		b.ReportMetric(allocs, m.name+"-allocs/req")
		// Page faults: memory the process gave back and touched again,
		// or grew into (a buffer regrown every export showed here first).
		b.ReportMetric(faults, m.name+"-faults/req")
	}
	// The ratios of the totals: the rounds alternate, so a drift in the
	// machine's speed falls on all of them.
	rpCPU, _, _, _, _ := rp.perRequest()
	for _, m := range []*sbsMode{naive, ours} {
		prefix := ""
		if m != ours {
			prefix = m.name + "-"
		}
		cpu, _, _, _, _ := m.perRequest()
		b.ReportMetric(cpu/rpCPU, prefix+"cpu-ratio")
		b.ReportMetric(median(m.roundP50)-median(rp.roundP50), prefix+"ttft-p50-delta-us")
		b.ReportMetric(us(percentile(m.ttft, 99)-percentile(rp.ttft, 99)), prefix+"ttft-p99-delta-us")
	}
	var load string
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	// Four lines a run: testing keeps ten of a benchmark's, over its runs.
	b.Logf("%d requests per mode, %d streams at once, rounds of %d; load average %s; "+
		"ttft p50 (median of the rounds), p99 µs; cpu µs, allocations, bytes, context switches, page faults per request; spans and metric exports",
		len(direct.ttft), direct.streams, sbsRound*direct.streams, load)
	for _, m := range modes {
		line := fmt.Sprintf("%-13s %7.0f %7.0f", m.name, median(m.roundP50), us(percentile(m.ttft, 99)))
		if m.proc != nil {
			cpu, allocs, bytes, switches, faults := m.perRequest()
			line += fmt.Sprintf(" %7.0f %5.0f %7.0f %5.1f %5.2f", cpu, allocs, bytes, switches, faults)
			if m.rec != nil {
				line += fmt.Sprintf(" %6d %3d", m.rec.spans.Load(), m.rec.metricExports.Load())
			}
			if os.Getenv("OPENAIHTTP_SBS_ROUNDS") != "" {
				line += fmt.Sprintf(" rounds %.0f", m.roundCPU)
			}
		}
		b.Log(line)
	}
}

// BenchmarkMetricExport is one collection and OTLP/HTTP export of the
// metrics a proxy holds after 50 streamed requests (the serving and HTTP
// metrics, cumulative), to a receiver in this process, with warm caches:
// the side-by-side exports them every second, and an idle proxy spends
// several times this per export (BENCHMARKS.md, "What a proxy costs doing
// nothing"). The benchmark fails if an export does not reach the receiver.
func BenchmarkMetricExport(b *testing.B) {
	upstream := httptest.NewServer(toyserver.New(toyserver.Config{
		Models: []string{"toy"}, Slots: 64, TokenDelay: time.Microsecond, PrefillBase: time.Microsecond, Jitter: -1,
	}))
	defer upstream.Close()
	rec := &otlpReceiver{}
	receiver := httptest.NewServer(rec)
	defer receiver.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)
	b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	b.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000") // only the benchmark's exports
	up, _ := url.Parse(upstream.URL)
	ctx := context.Background()
	p, prov, stop, err := newTracingProxy(ctx, up, openaihttp.NewTransport(openaihttp.TransportConfig{}))
	if err != nil {
		b.Fatal(err)
	}
	proxy := httptest.NewServer(p)
	defer func() {
		proxy.Close()
		if err := stop(); err != nil {
			b.Error(err)
		}
	}()
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()
	for range 50 {
		if _, err := streamOnce(client, proxy.URL); err != nil {
			b.Fatal(err)
		}
	}
	before := rec.metricExports.Load()
	b.ReportAllocs()
	for b.Loop() {
		if err := prov.MeterProvider.ForceFlush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if got := rec.metricExports.Load() - before; got < int64(b.N) {
		b.Fatalf("the receiver got %d metric exports of %d", got, b.N)
	}
}
