package overhead

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stack is how the study runs its processes and load.
type Stack struct {
	LLMTrace, Server, Self string // binaries: llmtrace, examples/httpserver, the test binary (the baseline's roles)
	Receiver               *Receiver
	LogDir                 string

	Slots      int           // the toy engine's batch
	TokenDelay time.Duration // its decode step
	Streams    int           // requests the client keeps open
	Warmup     time.Duration
	Measure    time.Duration
}

// Result is one configuration's run.
type Result struct {
	Config string  `json:"config"`
	Family Family  `json:"family"`
	Rate   float64 `json:"rate"`
	Round  int     `json:"round"`

	Requests int `json:"requests"` // finished in the measured window
	Served   int `json:"served"`   // sent in the warm-up and the window, finished or cut

	ReqPerSec float64 `json:"req_per_s"`
	TokPerSec float64 `json:"tok_per_s"`
	TTFTp50   float64 `json:"ttft_p50_ms"`
	TTFTp99   float64 `json:"ttft_p99_ms"`
	ITLp50    float64 `json:"itl_p50_ms"`
	ITLp99    float64 `json:"itl_p99_ms"`

	Proxy  ProcessCost `json:"proxy"`
	Server ProcessCost `json:"server"`
	// ClientCPU is the load generator's (and the receiver's) CPU per
	// request: it shares the two cores.
	ClientCPU float64 `json:"client_cpu_us_per_req"`

	// Traces are the traces the proxy exported (its root spans), Spans the
	// spans of both processes; MetricExports both processes' pushes.
	Traces        int `json:"traces"`
	Spans         int `json:"spans"`
	MetricExports int `json:"metric_exports"`

	Load string `json:"load_average"`
}

// ProcessCost is what one process spent per request while measured.
type ProcessCost struct {
	CPU    float64 `json:"cpu_us_per_req"`
	Allocs float64 `json:"allocs_per_req"`
	Bytes  float64 `json:"bytes_per_req"`
	MaxRSS float64 `json:"max_rss_mib"`
}

// Run runs one configuration: the two processes, a warm-up, the measured
// window, and the processes' shutdown (which exports what they hold).
func (s *Stack) Run(ctx context.Context, c Config, round int) (*Result, error) {
	service := fmt.Sprintf("ovh-%s-r%d", c.Name(), round)
	server, proxy, err := s.start(ctx, c, service)
	if err != nil {
		return nil, err
	}
	defer func() { server.Kill(); proxy.Kill() }() // no-ops once stopped
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.Streams, DisableCompression: true}}
	defer client.CloseIdleConnections()
	warm, cancel := context.WithTimeout(ctx, s.Warmup)
	w := Drive(warm, client, proxy.URL, s.Streams)
	cancel()
	if w.Requests == 0 {
		return nil, fmt.Errorf("%s: no request finished in the warm-up: %d errors, %s", c.Name(), w.Errors, w.FirstError)
	}
	before, err := snapshot(server, proxy)
	if err != nil {
		return nil, err
	}
	window, cancel := context.WithTimeout(ctx, s.Measure)
	l := Drive(window, client, proxy.URL, s.Streams)
	cancel()
	after, err := snapshot(server, proxy)
	if err != nil {
		return nil, err
	}
	if l.Errors > 0 || l.Requests == 0 {
		return nil, fmt.Errorf("%s: %d requests, %d errors: %s", c.Name(), l.Requests, l.Errors, l.FirstError)
	}
	client.CloseIdleConnections()
	if err := errors.Join(proxy.Stop(30*time.Second), server.Stop(30*time.Second)); err != nil {
		return nil, err
	}
	r := &Result{Config: c.Name(), Family: c.Family, Rate: c.Rate, Round: round, Requests: l.Requests, Served: w.Started + l.Started,
		ReqPerSec: float64(l.Requests) / l.Elapsed.Seconds(), TokPerSec: float64(l.Tokens) / l.Elapsed.Seconds(),
		TTFTp50: ms(percentile(l.TTFT, 50)), TTFTp99: ms(percentile(l.TTFT, 99)),
		ITLp50: ms(percentile(l.ITL, 50)), ITLp99: ms(percentile(l.ITL, 99)), Load: loadAverage()}
	n := float64(l.Requests)
	r.Server = cost(before[0], after[0], n)
	r.Proxy = cost(before[1], after[1], n)
	r.ClientCPU = (after[2].Process.CPUSeconds - before[2].Process.CPUSeconds) * 1e6 / n
	p, sv := s.Receiver.Counts(service+"-proxy"), s.Receiver.Counts(service+"-server")
	r.Traces, r.Spans, r.MetricExports = p.Roots, p.Spans+sv.Spans, p.MetricExports+sv.MetricExports
	return r, nil
}

// start runs the configuration's server and proxy. FreeAddr's port may be
// taken by another test's process before ours listens on it: such a start
// is tried again on fresh ports, twice at most.
func (s *Stack) start(ctx context.Context, c Config, service string) (server, proxy *Process, err error) {
	for range 3 {
		server, proxy, err = s.startOnce(ctx, c, service)
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return server, proxy, err
}

func (s *Stack) startOnce(ctx context.Context, c Config, service string) (server, proxy *Process, err error) {
	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = FreeAddr(); err != nil {
			return nil, nil, err
		}
	}
	slots, delay := strconv.Itoa(s.Slots), s.TokenDelay.String()
	srvURL, pxURL := "http://"+addrs[0], "http://"+addrs[2]
	if c.Family == Baseline {
		server, err = StartProcess(ctx, service+"-server", s.Self, []string{"-test.run=^$"},
			[]string{EnvRole + "=bare-server", EnvListen + "=" + addrs[0], EnvDebug + "=" + addrs[1], EnvSlots + "=" + slots, EnvTokenDelay + "=" + delay},
			s.LogDir, srvURL, addrs[1], srvURL+"/health")
		if err != nil {
			return nil, nil, err
		}
		proxy, err = StartProcess(ctx, service+"-proxy", s.Self, []string{"-test.run=^$"},
			[]string{EnvRole + "=bare-proxy", EnvListen + "=" + addrs[2], EnvDebug + "=" + addrs[3], EnvUpstream + "=" + srvURL},
			s.LogDir, pxURL, addrs[3], pxURL+"/v1/models")
	} else {
		server, err = StartProcess(ctx, service+"-server", s.Server,
			[]string{"-listen", addrs[0], "-model", "toy", "-slots", slots, "-token-delay", delay, "-stats-interval", "0", "-debug-listen", addrs[1]},
			c.Env(service+"-server", s.Receiver.Endpoint), s.LogDir, srvURL, addrs[1], srvURL+"/health")
		if err != nil {
			return nil, nil, err
		}
		proxy, err = StartProcess(ctx, service+"-proxy", s.LLMTrace,
			[]string{"proxy", "-listen", addrs[2], "-upstream", srvURL, "-models", "toy", "-stats-log", "0", "-debug-listen", addrs[3]},
			c.Env(service+"-proxy", s.Receiver.Endpoint), s.LogDir, pxURL, addrs[3], pxURL+"/v1/models")
	}
	if err != nil {
		server.Kill()
		return nil, nil, err
	}
	return server, proxy, nil
}

// snapshot reads the server's, the proxy's and this process's figures.
func snapshot(server, proxy *Process) ([3]Vars, error) {
	var out [3]Vars
	var err error
	if out[0], err = server.Vars(); err != nil {
		return out, err
	}
	if out[1], err = proxy.Vars(); err != nil {
		return out, err
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return out, err
	}
	out[2].Process.CPUSeconds = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	return out, nil
}

func cost(before, after Vars, n float64) ProcessCost {
	return ProcessCost{
		CPU:    (after.Process.CPUSeconds - before.Process.CPUSeconds) * 1e6 / n,
		Allocs: float64(after.Memstats.Mallocs-before.Memstats.Mallocs) / n,
		Bytes:  float64(after.Memstats.TotalAlloc-before.Memstats.TotalAlloc) / n,
		MaxRSS: float64(after.Process.MaxRSSBytes) / (1 << 20),
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p/100)]
}
