package openai_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every flag of `llmtrace proxy`, run through the built binary. Each case
// starts the proxy with its flag and checks what the flag is for.

// proxyFlags are the flags `llmtrace proxy -h` must list, each exercised
// below (TestProxyBinaryHelpListsEveryFlag fails on one not listed here).
var proxyFlags = []string{
	"listen", "upstream", "trust-traceparent", "public", "server-timing", "stall-factor", "stall-min",
	"models", "models-wait", "metrics-listen", "stats-out", "spans-out", "stats-log", "drain",
	"body-budget", "event-limit", "read-header-timeout", "read-timeout", "idle-timeout", "max-header-bytes",
	"upstream-header-timeout", "upstream-dial-timeout", "debug-listen", "max-conns", "route",
}

func TestProxyBinaryHelpListsEveryFlag(t *testing.T) {
	out, err := exec.Command(llmtraceBinary(t), "proxy", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("proxy -h: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z-]+)`).FindAllStringSubmatch(string(out), -1) {
		listed[m[1]] = true
	}
	for _, f := range proxyFlags {
		if !listed[f] {
			t.Errorf("-%s not in proxy -h", f)
		}
		delete(listed, f)
	}
	for f := range listed {
		t.Errorf("-%s is listed by proxy -h but has no test here", f)
	}
}

func TestProxyBinaryBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"proxy"}, "-upstream is required"},
		{[]string{"proxy", "-upstream", "localhost:8000"}, "want http://host:port"},
		{[]string{"proxy", "-upstream", "http://x", "-max-header-bytes", "0"}, "must be positive"},
		{[]string{"proxy", "-upstream", "http://x", "-read-timeout", "soon"}, "invalid value"},
	} {
		cmd := exec.Command(llmtraceBinary(t), c.args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errorAs(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), c.says) || strings.Contains(string(out), "panic") {
			t.Errorf("%v: %v\n%s\nwant exit 2 saying %q", c.args, err, out, c.says)
		}
	}
}

func errorAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// get fetches url's body.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func postJSON(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// -models, without it the upstream's /v1/models, and without that the
// tracker's rule (a name earns its series by a request that succeeded): 70
// junk model names cannot push the served model into "other";
// -metrics-listen serves the metrics, HTTP's among them; -upstream with /v1
// does not double the path.
func TestProxyBinaryModels(t *testing.T) {
	for _, c := range []struct {
		name  string
		base  string
		flags []string
		log   string
	}{
		{"-models", "", []string{"-models", "toy"}, ""},
		{"the upstream's /v1/models, -upstream with /v1", "/v1", nil, "models from the upstream"},
		{"-models-wait 0: the first 64 that succeed", "", []string{"-models-wait", "0"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newUpstream(t)
			metrics := freePort(t)
			px := startProxy(t, up.srv.URL+c.base, append([]string{"-metrics-listen", metrics}, c.flags...)...)
			for i := range 70 {
				postJSON(t, px.url+"/v1/chat/completions", fmt.Sprintf(`{"model":"junk-%d","messages":[{"role":"user","content":"x"}]}`, i))
			}
			if resp := postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 200 {
				t.Fatalf("toy: status %d", resp.StatusCode)
			}
			// The proxy records a request after its client has the whole
			// response (recording never delays a client): the toy's series
			// may lag the response by a moment on a busy machine.
			m := get(t, "http://"+metrics+"/metrics")
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(m, `gen_ai_request_model="toy"`) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
				m = get(t, "http://"+metrics+"/metrics")
			}
			px.stop(t)
			if !strings.Contains(m, `gen_ai_request_model="toy"`) || strings.Contains(m, `gen_ai_request_model="junk-`) {
				t.Errorf("toy has no series of its own, or junk has one:\n%.3000s", m)
			}
			if !strings.Contains(m, `gen_ai_request_model="other"`) {
				t.Error("no junk collapsed into other")
			}
			if !strings.Contains(m, "http_server_request_duration_seconds_count") || !strings.Contains(m, `http_route="/v1/chat/completions"`) ||
				!strings.Contains(m, "http_client_request_duration_seconds_count") {
				t.Errorf("no HTTP metrics in\n%.2000s", m)
			}
			if b, _ := os.ReadFile(px.stderr); c.log != "" && !strings.Contains(string(b), c.log) {
				t.Errorf("stderr lacks %q:\n%s", c.log, b)
			}
		})
	}
}

// -debug-listen serves the process's runtime figures and profiles.
func TestProxyBinaryDebugListen(t *testing.T) {
	up := newUpstream(t)
	debug := freePort(t)
	px := startProxy(t, up.srv.URL, "-models", "toy", "-debug-listen", debug)
	postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`)
	vars := get(t, "http://"+debug+"/debug/vars")
	index := get(t, "http://"+debug+"/debug/pprof/")
	px.stop(t)
	for _, want := range []string{`"memstats"`, `"Mallocs"`, `"process"`, `"cpu_seconds"`, `"max_rss_bytes"`} {
		if !strings.Contains(vars, want) {
			t.Errorf("/debug/vars lacks %s:\n%.500s", want, vars)
		}
	}
	if !strings.Contains(index, "heap") || !strings.Contains(index, "profile") {
		t.Errorf("/debug/pprof/:\n%.500s", index)
	}
}

// -max-conns: connections that never send a request fill the cap; every
// client is still served (the oldest silent connection makes room), and the
// exit says what they cost. Without the cap, 20,000 idle connections took
// every file descriptor and real requests failed.
func TestProxyBinaryMaxConns(t *testing.T) {
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-models", "toy", "-max-conns", "4")
	addr := strings.TrimPrefix(px.url, "http://")
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for range 3 {
		postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`)
	}
	px.stop(t)
	if st := readLines[jsonStats](t, px.statsPath); len(st) != 3 {
		t.Errorf("%d requests recorded, want 3", len(st))
	}
	errs, _ := os.ReadFile(px.stderr)
	if !regexp.MustCompile(`evicted_idle=[1-9]`).Match(errs) {
		t.Errorf("the exit did not count the evicted connections:\n%s", errs)
	}
}

// -server-timing: Go's client reads the header of a response in one piece
// and the trailer of a stream.
func TestProxyBinaryServerTiming(t *testing.T) {
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-server-timing")
	resp := postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`)
	h := resp.Header.Get("Server-Timing")
	resp = postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	tr := resp.Trailer.Get("Server-Timing")
	px.stop(t)
	if !strings.Contains(h, "e2e;dur=") || !strings.Contains(h, `traceparent;desc="00-`) || strings.Contains(h, "ttft") {
		t.Errorf("header %q", h)
	}
	if !strings.Contains(tr, "ttft;dur=") || !strings.Contains(tr, "decode;dur=") || !strings.Contains(tr, `traceparent;desc="00-`) {
		t.Errorf("trailer %q", tr)
	}
	st := readLines[jsonStats](t, px.statsPath)
	if len(st) != 2 || !strings.Contains(tr, st[1].TraceID) {
		t.Errorf("trailer %q names no trace of %+v", tr, st)
	}
}

// -route: an added path is traced as its operation (the upstream's 404 is
// still a traced request), a removed one passes untraced.
func TestProxyBinaryRoute(t *testing.T) {
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-route", "/llm/chat/=chat", "-route", "/v1/chat/completions=")
	chat := `{"model":"toy","messages":[{"role":"user","content":"x"}]}`
	if resp := postJSON(t, px.url+"/llm/chat", chat); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/llm/chat: %d, want the upstream's 404", resp.StatusCode)
	}
	if resp := postJSON(t, px.url+"/v1/chat/completions", chat); resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/chat/completions: %d", resp.StatusCode)
	}
	px.stop(t)
	st := readLines[jsonStats](t, px.statsPath)
	if len(st) != 1 || st[0].Operation != "chat" || st[0].ErrorType != "404" || st[0].Model != "toy" {
		t.Errorf("stats %+v, want the /llm/chat request alone", st)
	}
}

// -public, -trust-traceparent: a caller's trace is not joined (a new one,
// linked); a trusted caller's unsampled flag drops the trace (its stats
// are still written).
func TestProxyBinaryTraceContext(t *testing.T) {
	const caller = "0af7651916cd43dd8448eb211c80319c"
	tp := "00-" + caller + "-b7ad6b7169203331-00"
	for _, c := range []struct {
		flag           string
		joined, traced bool
	}{{"-public", false, true}, {"-trust-traceparent", true, false}} {
		t.Run(c.flag, func(t *testing.T) {
			up := newUpstream(t)
			px := startProxy(t, up.srv.URL, c.flag)
			postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`, "traceparent", tp)
			px.stop(t)
			st := readLines[jsonStats](t, px.statsPath)
			sp := readLines[jsonSpan](t, px.spansPath)
			if len(st) != 1 || (st[0].TraceID == caller) != c.joined || (len(sp) > 0) != c.traced {
				t.Fatalf("stats %+v, %d spans", st, len(sp))
			}
			if got := up.traceparents(); len(got) != 1 || strings.Contains(got[0], caller) != c.joined {
				t.Errorf("upstream traceparent %q", got)
			}
		})
	}
}

// The server's bounds: a client stalled in its headers, one with too big
// headers, one stalled in its body, an idle keep-alive connection; and the
// upstream's: too slow to answer, unreachable.
func TestProxyBinaryTimeouts(t *testing.T) {
	slowUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer slowUp.Close()
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-read-header-timeout", "200ms", "-read-timeout", "500ms", "-max-header-bytes", "4096")
	host := strings.TrimPrefix(px.url, "http://")

	closedWithin := func(name string, conn net.Conn, within time.Duration) string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(within))
		var got strings.Builder
		_, err := io.Copy(&got, conn)
		var ne net.Error
		if errorAsNet(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the proxy still holds the connection after %v (read %q)", name, within, got.String())
		}
		return got.String()
	}
	// Half the headers, then nothing.
	c1, _ := net.Dial("tcp", host)
	fmt.Fprint(c1, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	closedWithin("-read-header-timeout", c1, 3*time.Second)
	c1.Close()
	// Headers, half the body, then nothing.
	c2, _ := net.Dial("tcp", host)
	fmt.Fprint(c2, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":\"toy\",")
	if got := closedWithin("-read-timeout", c2, 3*time.Second); !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("-read-timeout: the slow client got %q, want a 408", got)
	}
	c2.Close()
	// 8 KB of headers against -max-header-bytes 4096.
	req, _ := http.NewRequest(http.MethodGet, px.url+"/v1/models", nil)
	req.Header.Set("X-Big", strings.Repeat("h", 8<<10))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("big headers: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	px.stop(t)

	// An idle keep-alive connection after one request (no -read-timeout,
	// which would bound the idle time too).
	px = startProxy(t, up.srv.URL, "-idle-timeout", "300ms", "-read-timeout", "0")
	c3, _ := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	fmt.Fprint(c3, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c3), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %v", err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	closedWithin("-idle-timeout", c3, 3*time.Second)
	c3.Close()
	px.stop(t)

	px = startProxy(t, slowUp.URL, "-upstream-header-timeout", "300ms", "-models-wait", "0")
	start := time.Now()
	resp := postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy"}`)
	waited := time.Since(start)
	px.stop(t)
	if resp.StatusCode != http.StatusGatewayTimeout || waited > 2500*time.Millisecond {
		t.Errorf("-upstream-header-timeout: status %d after %v", resp.StatusCode, waited)
	}
	if st := readLines[jsonStats](t, px.statsPath); len(st) != 1 || st[0].ErrorType != "timeout" {
		t.Errorf("stats %+v", st)
	}

	// 192.0.2.1 (TEST-NET-1) never answers, or is unreachable at once.
	px = startProxy(t, "http://192.0.2.1:9", "-upstream-dial-timeout", "300ms", "-models-wait", "0")
	start = time.Now()
	resp = postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy"}`)
	waited = time.Since(start)
	px.stop(t)
	if resp.StatusCode != http.StatusGatewayTimeout && resp.StatusCode != http.StatusBadGateway || waited > 2500*time.Millisecond {
		t.Errorf("-upstream-dial-timeout: status %d after %v", resp.StatusCode, waited)
	}
}

func errorAsNet(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	*ne = e
	return ok
}

// -spans-out is flushed every second and -stats-out per line: a reader
// tailing them sees a request while the proxy runs; -stats-log writes the
// stats line; -drain lets a running stream finish on SIGTERM.
func TestProxyBinaryOutputsAndDrain(t *testing.T) {
	up := newUpstream(t)
	px := startProxy(t, up.srv.URL, "-stats-log", "100ms", "-drain", "10s")
	postJSON(t, px.url+"/v1/chat/completions", `{"model":"toy","messages":[{"role":"user","content":"x"}]}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		sp, _ := os.ReadFile(px.spansPath)
		st, _ := os.ReadFile(px.statsPath)
		logs, _ := os.ReadFile(px.stderr)
		// The stats line comes with the tracker's sweep, once a second.
		if strings.Contains(string(sp), `"chat toy"`) && strings.Contains(string(st), `"toy"`) && strings.Contains(string(logs), "throughput") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("while running: spans %q, stats %q, stderr %q", sp, st, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A long stream, then SIGTERM: it finishes within -drain.
	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(px.url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"toy","stream":true,"max_tokens":150,"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	time.Sleep(100 * time.Millisecond)
	px.stop(t)
	if b := <-done; !strings.Contains(b, "[DONE]") {
		t.Errorf("the stream was cut at SIGTERM: %.200q", b)
	}
	st := readLines[jsonStats](t, px.statsPath)
	if len(st) != 2 || st[1].FinishReason == "abort" || st[1].ErrorType != "" {
		t.Errorf("stats %+v", st)
	}
}

// -stall-factor, -stall-min, -event-limit, -body-budget: a stream with a
// stall gets its event; an event over the limit passes unread; a budget
// too small for the event does the same.
func TestProxyBinaryStreamBounds(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 8 {
			if i == 6 {
				time.Sleep(150 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		// A 4 KB event in two writes: assembled, not read in place.
		big := fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", strings.Repeat("z", 4000))
		fmt.Fprint(w, big[:2000])
		w.(http.Flusher).Flush()
		time.Sleep(5 * time.Millisecond)
		fmt.Fprint(w, big[2000:])
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	for _, c := range []struct {
		flags []string
		out   int64 // the 4 KB event unread: 8 tokens, else 9
		stall bool
	}{
		{[]string{"-stall-factor", "4", "-stall-min", "50ms"}, 9, true},
		{[]string{"-stall-min", "1s"}, 9, false},
		{[]string{"-event-limit", "1024"}, 8, true},
		{[]string{"-body-budget", "2048"}, 8, true},
	} {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			px := startProxy(t, up.URL, append([]string{"-models-wait", "0"}, c.flags...)...)
			postJSON(t, px.url+"/v1/chat/completions", `{"model":"m","stream":true}`)
			px.stop(t)
			st := readLines[jsonStats](t, px.statsPath)
			if len(st) != 1 || st[0].NumOutputTokens != c.out || st[0].FinishReason != "stop" {
				t.Fatalf("stats %+v, want %d tokens", st, c.out)
			}
			stalls := 0
			for _, s := range readLines[jsonSpan](t, px.spansPath) {
				if s.Name == "llm.proxy.stream" {
					stalls = int(attrInt(t, s, "llm.proxy.stalls"))
				}
			}
			if (stalls > 0) != c.stall {
				t.Errorf("%d stalls, want some: %v", stalls, c.stall)
			}
		})
	}
}

// TestProxyBinaryRSS: 40 concurrent 15 MB bodies, each naming its model
// after the messages as the SDKs do, through the built proxy. It holds no
// body, so its peak RSS stays far below the 990 MB the proxy used to take
// (a bound with room for a loaded machine's GC; the figure is logged).
func TestProxyBinaryRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 1.2 GB through loopback")
	}
	const n, size = 40, 15 << 20
	var mu sync.Mutex
	read := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, _ := io.Copy(io.Discard, r.Body)
		mu.Lock()
		read += int(k)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	px := startProxy(t, up.URL, "-models-wait", "0")
	body := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}],"model":"big","stream":true}`
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(px.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			// What the client got, for when the proxy's record says
			// otherwise (a suite run beside two CPU burners recorded
			// one of 40 as an abort).
			if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(string(b), "[DONE]") {
				errs <- fmt.Errorf("the client got %d, %v: %.200q", resp.StatusCode, err, b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	hwm := peakRSS(t, px.cmd.Process.Pid)
	px.stop(t)
	t.Logf("proxy peak RSS (VmHWM) with %d concurrent %d MB bodies: %d MB", n, size>>20, hwm>>20)
	if read != n*len(body) {
		t.Errorf("upstream read %d bytes, want %d", read, n*len(body))
	}
	st := readLines[jsonStats](t, px.statsPath)
	for _, s := range st {
		if s.Model != "big" || s.FinishReason != "stop" {
			t.Errorf("stats %+v", s)
		}
	}
	if len(st) != n {
		t.Errorf("%d stats lines, want %d", len(st), n)
	}
	if hwm > 200<<20 {
		t.Errorf("peak RSS %d MB: the proxy holds bodies", hwm>>20)
	}
}

// peakRSS is a process's VmHWM from /proc (Linux), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`VmHWM:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Skip("no VmHWM")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}
