package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestProxyCommand(t *testing.T) {
	var tp string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"llama","object":"model"}]}`)
			return
		}
		tp = r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "text/event-stream")
		for i, c := range []string{`{"choices":[{"delta":{"role":"assistant"}}]}`, `{"choices":[{"delta":{"content":"a"}}]}`,
			`{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}`, `[DONE]`} {
			if i > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	dir := t.TempDir()
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-stats-out", statsFile, "-spans-out", spansFile, "-stats-log", "0")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("body %s", body)
	}
	// The request is recorded when the response has ended.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, _ := os.ReadFile(statsFile); bytes.Contains(b, []byte(`"finish_reason":"stop"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stats; stderr:\n%s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "models from the upstream") || !strings.Contains(stderr.String(), "models=[llama]") {
		t.Errorf("the upstream's /v1/models was not asked:\n%s", stderr.String())
	}
	stats := readStats(t, statsFile)
	var s map[string]any
	for _, v := range stats {
		s = v
	}
	if len(stats) != 1 || s["num_output_tokens"] != float64(2) || s["first_token_latency_s"] == nil {
		t.Fatalf("stats %v", stats)
	}
	sp, _ := readSpans(t, spansFile)
	names := map[string]bool{}
	for _, x := range sp {
		names[x.Name] = true
		if x.Name == "POST" {
			// The upstream got the upstream call's span, under the root.
			if want := "00-" + s["trace_id"].(string) + "-" + x.SpanID + "-01"; tp != want || x.ParentSpanID != s["span_id"] {
				t.Errorf("upstream traceparent %q, want %q; the call's parent %s, the root %s", tp, want, x.ParentSpanID, s["span_id"])
			}
		}
	}
	for _, n := range []string{"chat llama", "llm.proxy.wait_first_token", "llm.proxy.stream", "llm.detokenize", "POST"} {
		if !names[n] {
			t.Errorf("no %s span in %v", n, names)
		}
	}
}

func TestProxyUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-upstream", "nope"}, "want http://host:port"},
		{nil, "-upstream is required"},
		{[]string{"-upstream", "ftp://x"}, "want http://host:port"},
		{[]string{"-upstream", "http://x", "-body-budget", "0"}, "must be positive"},
		{[]string{"-upstream", "http://x", "-no-such-flag"}, "not defined"},
		// Values the library would replace with its defaults, or read
		// as something else than the user meant, are refused.
		{[]string{"-upstream", "127.0.0.1:8000"}, "want http://host:port"},
		// url.Parse takes any digits for a port: the proxy served, every
		// request failing at its dial.
		{[]string{"-listen", "127.0.0.1:0", "-models", "m", "-upstream", "http://127.0.0.1:99999"}, "port 99999 is out of range"},
		{[]string{"-listen", "127.0.0.1:0", "-models", "m", "-upstream", "http://127.0.0.1:0/v1"}, "port 0 is out of range"},
		{[]string{"-upstream", "http://x", "-stall-factor", "0"}, "-stall-factor must be a finite number > 0"},
		{[]string{"-upstream", "http://x", "-stall-factor", "-2"}, "-stall-factor must be a finite number > 0"},
		{[]string{"-upstream", "http://x", "-stall-factor", "NaN"}, "-stall-factor must be a finite number > 0"},
		{[]string{"-upstream", "http://x", "-stall-min", "0s"}, "-stall-min must be > 0"},
		{[]string{"-upstream", "http://x", "-upstream-header-timeout", "0s"}, "-upstream-header-timeout and -upstream-dial-timeout must be > 0"},
		{[]string{"-upstream", "http://x", "-upstream-dial-timeout", "-1s"}, "-upstream-header-timeout and -upstream-dial-timeout must be > 0"},
		{[]string{"-upstream", "http://x", "-drain", "-1s"}, "must be ≥ 0"},
		{[]string{"-upstream", "http://x", "-models-wait", "-1s"}, "must be ≥ 0"},
		{[]string{"-upstream", "http://x", "-read-timeout", "-1s"}, "must be ≥ 0"},
		{[]string{"-upstream", "http://x", "-max-conns", "-1"}, "must be ≥ 0"},
		// A positional argument is a mistake the proxy must not run with:
		// the upstream given bare, a list split by a space.
		{[]string{"-listen", "127.0.0.1:0", "http://127.0.0.1:8000"}, `unexpected argument "http://127.0.0.1:8000"`},
		{[]string{"-listen", "127.0.0.1:0", "-upstream", "http://x", "-models", "a,", "b"}, `unexpected argument "b"`},
	} {
		var stderr bytes.Buffer
		// Ended already: a proxy that wrongly starts serving exits at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if code := runProxy(ctx, c.args, io.Discard, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.says)
		}
	}
}

// TestProxyDrainCut: a stream still running when -drain passes is cut and
// ends as unfinished with what it delivered (its tokens, its end at the
// cut), and the proxy exits 0. The handlers the cut ends must finish
// recording before the tracker shuts down: otherwise the tracker ends the
// request itself at its last known time, with the tokens not yet settled,
// and the proxy's own finish is rejected.
func TestProxyDrainCut(t *testing.T) {
	// Tokens far apart, as a long prefill or a busy engine makes them:
	// the handler learns of the cut no sooner than the next one.
	const gap = 400 * time.Millisecond
	upDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-upDone:
				return
			case <-time.After(gap):
			}
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	defer close(upDone)
	statsFile := filepath.Join(t.TempDir(), "stats.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-stats-out", statsFile, "-stats-log", "0", "-models", "llama", "-drain", "300ms")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	start := time.Now()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := 0
	buf := make([]byte, 4096)
	for got < 3 {
		n, err := resp.Body.Read(buf)
		got += bytes.Count(buf[:n], []byte(`"content":"a"`))
		if err != nil {
			t.Fatalf("after %d chunks: %v", got, err)
		}
	}
	cancel()
	go io.Copy(io.Discard, resp.Body)
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	elapsed := time.Since(start).Seconds()
	stats := readStats(t, statsFile)
	if len(stats) != 1 {
		t.Fatalf("%d stats lines, want 1; stderr:\n%s", len(stats), stderr.String())
	}
	for _, s := range stats {
		e2e, _ := s["e2e_latency_s"].(float64)
		n, _ := s["num_output_tokens"].(float64)
		if s["finish_reason"] != "unfinished" || n < 3 || e2e < 0.3 || e2e > elapsed {
			t.Errorf("stats %v\nwant unfinished, ≥ 3 tokens, e2e between the drain (0.3 s) and %.3f s\nstderr:\n%s", s, elapsed, stderr.String())
		}
	}
}

// TestProxyExitBackendSilent: an OTLP endpoint that accepts and never
// answers takes the whole exit bound; the -stats-out and -spans-out lines
// of the last requests are written all the same, before the export, and
// no -stats-out failure is reported for the export's lost time.
func TestProxyExitBackendSilent(t *testing.T) {
	exportToSilentBackend(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}]}`, `[DONE]`} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	dir := t.TempDir()
	statsFile, spansFile := filepath.Join(dir, "stats.jsonl"), filepath.Join(dir, "spans.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-stats-out", statsFile, "-spans-out", spansFile, "-stats-log", "0", "-models", "llama")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if s := readStats(t, statsFile); len(s) != 1 {
		t.Errorf("%d stats lines, want 1", len(s))
	}
	if sp, _ := readSpans(t, spansFile); len(sp) == 0 {
		t.Errorf("no spans in -spans-out")
	}
	if strings.Contains(stderr.String(), "-stats-out") {
		t.Errorf("a -stats-out failure reported:\n%s", stderr.String())
	}
}

// TestProxyStartErrors: an address in use or a file that cannot be
// created fails the start with status 1, naming the flag (three flags
// take an address).
func TestProxyStartErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-listen", busy}, "-listen: listen tcp " + busy},
		{[]string{"-listen", "127.0.0.1:0", "-metrics-listen", busy}, "-metrics-listen: listen tcp " + busy},
		{[]string{"-listen", "127.0.0.1:0", "-debug-listen", busy}, "-debug-listen: listen tcp " + busy},
		{[]string{"-listen", "127.0.0.1:0", "-stats-out", "/nonexistent/s.jsonl"}, "-stats-out: open /nonexistent/s.jsonl"},
		{[]string{"-listen", "127.0.0.1:0", "-spans-out", "/nonexistent/s.jsonl"}, "-spans-out: open /nonexistent/s.jsonl"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"-upstream", "http://127.0.0.1:1", "-models", "m", "-stats-log", "0"}, c.args...)
		if code := runProxy(context.Background(), args, io.Discard, &stderr, func(string) { t.Errorf("%v: serving", c.args) }); code != 1 || !strings.Contains(stderr.String(), c.says) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", c.args, code, stderr.String(), c.says)
		}
	}
}

// TestProxyOutputFailsBeforeModels: a -stats-out that cannot be created
// fails the start before the upstream is asked for its models, which
// -models-wait lets take 10 s (an engine still loading): the error came
// only after that wait, and after asking the upstream.
func TestProxyOutputFailsBeforeModels(t *testing.T) {
	var asked atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "loading", http.StatusServiceUnavailable)
	}))
	defer up.Close()
	var stderr bytes.Buffer
	args := []string{"-listen", "127.0.0.1:0", "-upstream", up.URL, "-stats-log", "0", "-stats-out", "/nonexistent/s.jsonl"}
	code := runProxy(context.Background(), args, io.Discard, &stderr, func(string) { t.Error("serving") })
	if code != 1 || !strings.Contains(stderr.String(), "-stats-out: open /nonexistent/s.jsonl") {
		t.Errorf("exit %d, stderr %q; want 1 and -stats-out named", code, stderr.String())
	}
	if n := asked.Load(); n > 0 || strings.Contains(stderr.String(), "no model list") {
		t.Errorf("the upstream was asked %d times for its models before the output failed:\n%s", n, stderr.String())
	}
}

// startProxy runs the proxy command on a free loopback port with args
// until ctx ends; it returns the address it listens on and the channel of
// its exit status, and fails the test if it exits before listening.
func startProxy(ctx context.Context, t *testing.T, stderr *lockedBuffer, args ...string) (addr string, done <-chan int) {
	t.Helper()
	addrc, exit := make(chan string, 1), make(chan int, 1)
	go func() {
		exit <- runProxy(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), io.Discard, stderr, func(a string) { addrc <- a })
	}()
	select {
	case addr = <-addrc:
	case code := <-exit:
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	return addr, exit
}
