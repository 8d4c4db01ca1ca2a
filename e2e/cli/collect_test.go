package cli

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// lifecycle is a complete two-sided request starting at t0.
func lifecycle(id string, t0 time.Time) []otelstats.Update {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return []otelstats.Update{
		{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"},
		{RequestID: id, Kind: otelstats.KindInputProcessed, Time: ms(1), NumPromptTokens: 10},
		{RequestID: id, Kind: otelstats.KindQueued, Time: ms(2)},
		{RequestID: id, Kind: otelstats.KindPrefilling, Time: ms(5), NumComputedTokens: 10, NumCachedTokens: 4},
		{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(10)},
		{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(11), NumNewTokens: 1},
		{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(20)},
		{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(21), NumNewTokens: 1},
		{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: ms(22), FinishReason: "stop"},
		{RequestID: id, Kind: otelstats.KindFinished, Time: ms(23), FinishReason: "stop"},
	}
}

// jsonBody is lifecycle(id, now) as JSON lines.
func jsonBody(id string) []byte {
	var b []byte
	for _, u := range lifecycle(id, time.Now()) {
		b = transport.AppendUpdateJSON(b, &u)
	}
	return b
}

// readStats reads a -stats-out file: request id → RequestStats fields.
func readStats(t testing.TB, path string) map[string]map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	// The file is being written: a last line without its newline is not
	// complete yet.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		if id, ok := m["request_id"].(string); ok {
			out[id] = m
		}
	}
	return out
}

// collector is a running `llmtrace collect`.
type collector struct {
	*proc
	stats string // its -stats-out file
}

// startCollect runs collect with args plus -stats-out and -stats-log 0,
// and waits until it logs that it listens.
func startCollect(t *testing.T, env []string, args ...string) *collector {
	t.Helper()
	stats := filepath.Join(t.TempDir(), "stats.jsonl")
	args = append([]string{"collect", "-stats-out", stats, "-stats-log", "0"}, args...)
	c := &collector{proc: start(t, env, root, llmtrace(t), args...), stats: stats}
	c.waitFor("collect to listen", func() bool {
		e := c.stderr.String()
		return strings.Contains(e, "msg=listening") || strings.Contains(e, `msg="serving HTTP"`)
	})
	return c
}

// listenAddr is the address collect logged for network ("unix", "tcp").
func (c *collector) listenAddr(network string) string {
	c.waitStderr("msg=listening addr=" + network + ":")
	for _, line := range strings.Split(c.stderr.String(), "\n") {
		if !strings.Contains(line, "msg=listening") {
			continue
		}
		v := logValue(line, "listening", "addr")
		if n, a, _ := strings.Cut(v, ":"); n == network {
			return a
		}
	}
	c.t.Fatalf("collect logged no %s address:\n%s", network, c.stderr.String())
	return ""
}

// httpAddr is the address collect's HTTP server logged.
func (c *collector) httpAddr() string {
	c.waitStderr(`msg="serving HTTP"`)
	a := logValue(c.stderr.String(), "serving HTTP", "addr")
	if a == "" {
		c.t.Fatalf("collect logged no HTTP address:\n%s", c.stderr.String())
	}
	return a
}

// waitStats waits until the -stats-out file holds every id (while collect
// runs: the file is flushed within a second).
func (c *collector) waitStats(ids ...string) map[string]map[string]any {
	c.t.Helper()
	var s map[string]map[string]any
	c.waitFor(fmt.Sprintf("stats of %v in -stats-out", ids), func() bool {
		s = readStats(c.t, c.stats)
		for _, id := range ids {
			if s[id] == nil {
				return false
			}
		}
		return true
	})
	return s
}

// waitFinished waits until -stats-out holds a complete line for id,
// without parsing the file (it may hold hundreds of thousands of lines).
func (c *collector) waitFinished(id string) {
	c.t.Helper()
	key := []byte(`{"request_id":"` + id + `",`)
	var off int64
	c.waitFor("stats of "+id+" in -stats-out", func() bool {
		f, err := os.Open(c.stats)
		if err != nil {
			return false
		}
		defer f.Close()
		b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
		b = b[:bytes.LastIndexByte(b, '\n')+1]
		if bytes.Contains(b, key) {
			return true
		}
		// Lines are whole once flushed: the next search starts after them.
		off += int64(len(b))
		return false
	})
}

// stopped stops collect, checks it exited 0 and returns its final counters.
func (c *collector) stopped() map[string]int64 {
	c.t.Helper()
	if code := c.stop(); code != 0 {
		c.t.Fatalf("collect exited %d", code)
	}
	out := map[string]int64{}
	for _, k := range []string{"streams", "updates", "recorded", "rejected", "dropped", "malformed", "refused", "evicted", "unauthorized", "timed_out", "accept_errors"} {
		out[k] = logInt(c.stderr.String(), "collector stopped", k)
	}
	return out
}

func checkComplete(t testing.TB, id string, s map[string]any) {
	t.Helper()
	if s == nil {
		t.Errorf("%s: no stats", id)
		return
	}
	for k, want := range map[string]float64{"queue_duration_s": 0.003, "first_token_latency_s": 0.011, "e2e_latency_s": 0.023, "num_output_tokens": 2} {
		if v, _ := s[k].(float64); v < want-1e-6 || v > want+1e-6 {
			t.Errorf("%s: %s = %v, want %v", id, k, s[k], want)
		}
	}
}

func produce(t testing.TB, cfg transport.ProducerConfig, ids ...string) transport.ProducerStats {
	t.Helper()
	p, err := transport.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		for _, u := range lifecycle(id, time.Now()) {
			p.Send(u)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("producer close: %v", err)
	}
	return p.Stats()
}

// TestCollectHTTP: the README's `collect -listen … -http ADDR` (which
// panicked at start): POST /v1/updates in both encodings, /healthz,
// a gzip-compressed body, /metrics with -prometheus, and -stats-out
// readable while collect runs.
func TestCollectHTTP(t *testing.T) {
	dir := shortDir(t)
	c := startCollect(t, noExport(), "-listen", "unix:"+filepath.Join(dir, "c.sock"), "-http", "127.0.0.1:0", "-prometheus")
	base := "http://" + c.httpAddr()
	resp, err := http.Post(base+"/v1/updates", "application/x-ndjson", bytes.NewReader(jsonBody("http-json")))
	if err != nil {
		t.Fatal(err)
	}
	var st transport.StreamStats
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || st.Updates != 10 || st.Encoding != "json" {
		t.Fatalf("POST: %d %+v", resp.StatusCode, st)
	}
	bin := transport.AppendHeader(nil)
	for _, u := range lifecycle("http-binary", time.Now()) {
		bin = transport.AppendUpdate(bin, &u, transport.Stamp{Ns: u.Time.UnixNano()})
	}
	resp, err = http.Post(base+"/v1/updates", "application/octet-stream", bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Compressed, as a log shipper posts it.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(jsonBody("http-gzip"))
	zw.Close()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/updates", &gz)
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("gzip POST: %d", resp.StatusCode)
	}
	s := c.waitStats("http-json", "http-binary", "http-gzip")
	checkComplete(t, "http-json", s["http-json"])
	checkComplete(t, "http-binary", s["http-binary"])
	checkComplete(t, "http-gzip", s["http-gzip"])
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "llm_collector_updates"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, no %q in\n%.2000s", path, resp.StatusCode, want, b)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if n := c.stopped(); n["updates"] != 30 || n["rejected"] != 0 || n["dropped"] != 0 {
		t.Errorf("final counters %v", n)
	}
}

// TestCollectListenForms: every -listen form (unix:PATH, a bare path,
// tcp:127.0.0.1:PORT, - for stdin) at once, producers in both encodings.
func TestCollectListenForms(t *testing.T) {
	dir := shortDir(t)
	unixSock, bareSock := filepath.Join(dir, "u.sock"), filepath.Join(dir, "bare.sock")
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	c := &collector{stats: filepath.Join(t.TempDir(), "stats.jsonl")}
	cmd := execCommand(llmtrace(t), "collect", "-listen", "unix:"+unixSock, "-listen", bareSock, "-listen", "tcp:127.0.0.1:0",
		"-listen", "-", "-stats-out", c.stats, "-stats-log", "0", "-align-clocks", "-grace", "3s", "-hold", "3s",
		"-queue", "1024", "-workers", "3", "-v")
	cmd.Stdin = stdinR
	c.proc = startCmd(t, cmd, noExport(), root)
	stdinR.Close() // the child has its copy
	c.waitStderr("msg=listening addr=tcp:")
	tcp := c.listenAddr("tcp")
	if a := c.listenAddr("unix"); a != unixSock && a != bareSock {
		t.Errorf("unix address %q", a)
	}
	produce(t, transport.ProducerConfig{Addr: "unix:" + unixSock, Name: "unix-binary"}, "unix-binary")
	produce(t, transport.ProducerConfig{Addr: bareSock, Name: "bare-json", JSON: true}, "bare-json")
	produce(t, transport.ProducerConfig{Addr: "tcp:" + tcp, Name: "tcp-binary"}, "tcp-binary")
	produce(t, transport.ProducerConfig{Addr: "tcp:" + tcp, Name: "tcp-json", JSON: true}, "tcp-json")
	stdinW.Write(jsonBody("stdin"))
	stdinW.Write([]byte(`{"request_id":"bad","type":"NOPE","ts":1}` + "\n"))
	ids := []string{"unix-binary", "bare-json", "tcp-binary", "tcp-json", "stdin"}
	s := c.waitStats(ids...)
	for _, id := range ids {
		checkComplete(t, id, s[id])
	}
	// -v logs the rejection of the bad line.
	c.waitStderr("unknown kind")
	stdinW.Close()
	n := c.stopped()
	if n["updates"] != 50 || n["rejected"] != 1 {
		t.Errorf("final counters %v", n)
	}
	for _, p := range []string{unixSock, bareSock} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind", p)
		}
	}
}

// TestCollectStdinOnly: with stdin the only input, collect ends with it.
func TestCollectStdinOnly(t *testing.T) {
	stats := filepath.Join(t.TempDir(), "s.jsonl")
	spans := filepath.Join(t.TempDir(), "spans.jsonl")
	code, _, stderr := run(t, noExport(), string(jsonBody("only-stdin"))+"garbage\n", llmtrace(t),
		"collect", "-listen", "-", "-stats-out", stats, "-spans-out", spans, "-stats-log", "0")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	checkComplete(t, "only-stdin", readStats(t, stats)["only-stdin"])
	b, _ := os.ReadFile(spans)
	if n := bytes.Count(b, []byte(`"name":"chat m"`)); n != 1 {
		t.Errorf("%d root spans in -spans-out", n)
	}
	if logInt(stderr, "collector stopped", "malformed") != 1 {
		t.Errorf("the garbage line is not counted:\n%s", stderr)
	}
}

// TestCollectToken: with -token-file (or $LLMTRACE_COLLECTOR_TOKEN), TCP
// and HTTP producers must present it; the Unix socket is trusted.
func TestCollectToken(t *testing.T) {
	const tok = "7c1d0e-shared-secret"
	for _, from := range []string{"file", "env"} {
		t.Run(from, func(t *testing.T) {
			dir := shortDir(t)
			env, args := noExport(), []string{}
			if from == "file" {
				f := filepath.Join(dir, "token")
				os.WriteFile(f, []byte(tok+"\n# the rest is ignored\n"), 0o600)
				args = append(args, "-token-file", f)
			} else {
				env = noExport("LLMTRACE_COLLECTOR_TOKEN=" + tok)
			}
			sock := filepath.Join(dir, "c.sock")
			c := startCollect(t, env, append(args, "-listen", "unix:"+sock, "-listen", "tcp:127.0.0.1:0", "-http", "127.0.0.1:0")...)
			tcp := c.listenAddr("tcp")
			produce(t, transport.ProducerConfig{Addr: "tcp:" + tcp, Token: tok}, "tcp-with-token")
			produce(t, transport.ProducerConfig{Addr: "unix:" + sock}, "unix-trusted")
			// Strangers: a producer without the token, a wrong bearer.
			stranger, err := transport.NewProducer(transport.ProducerConfig{Addr: "tcp:" + tcp, MaxBackoff: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range lifecycle("stranger", time.Now()) {
				stranger.Send(u)
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+c.httpAddr()+"/v1/updates", bytes.NewReader(jsonBody("wrong-bearer")))
			req.Header.Set("Authorization", "Bearer not-it")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("wrong bearer: %d", resp.StatusCode)
			}
			req, _ = http.NewRequest(http.MethodPost, "http://"+c.httpAddr()+"/v1/updates", bytes.NewReader(jsonBody("bearer")))
			req.Header.Set("Authorization", "Bearer "+tok)
			if resp, err = http.DefaultClient.Do(req); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			http.DefaultClient.CloseIdleConnections()
			c.waitStats("tcp-with-token", "unix-trusted", "bearer")
			c.waitStderr("unauthorized=1")
			stranger.Close(context.Background())
			n := c.stopped()
			if n["unauthorized"] < 2 {
				t.Errorf("final counters %v: strangers not counted", n)
			}
			s := readStats(t, c.stats)
			if s["stranger"] != nil || s["wrong-bearer"] != nil {
				t.Error("a stranger's request was recorded")
			}
		})
	}
}

// TestCollectRefusesRemoteAddresses: -http and -listen tcp: follow one
// loopback rule, with an error that says what to do.
func TestCollectRefusesRemoteAddresses(t *testing.T) {
	bin := llmtrace(t)
	for _, args := range [][]string{
		{"-http", ":0"},
		{"-http", "0.0.0.0:0"},
		{"-listen", "tcp:0.0.0.0:0"},
		{"-listen", "tcp::0"},
	} {
		code, _, stderr := run(t, noExport(), "", bin, append([]string{"collect", "-stats-log", "0"}, args...)...)
		if code != 1 || !strings.Contains(stderr, "not a loopback address") || !strings.Contains(stderr, "-allow-remote") {
			t.Errorf("collect %v: exit %d\n%s", args, code, stderr)
		}
	}
	// With -allow-remote (and a token) it starts, and warns without one.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tok"), []byte("t0k"), 0o600)
	c := startCollect(t, noExport(), "-http", ":0", "-allow-remote", "-token-file", filepath.Join(dir, "tok"))
	c.stopped()
	c = startCollect(t, noExport(), "-listen", "tcp:0.0.0.0:0", "-allow-remote")
	c.waitStderr("without a token")
	c.stopped()
}

// TestCollectIdleTimeout: a connection that sends nothing is closed after
// -idle-timeout and counted; a Producer's pings keep its connection.
func TestCollectIdleTimeout(t *testing.T) {
	c := startCollect(t, noExport(), "-listen", "tcp:127.0.0.1:0", "-idle-timeout", "500ms")
	tcp := c.listenAddr("tcp")
	silent, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	silent.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from the collector")
	}
	silent.Close()
	p, err := transport.NewProducer(transport.ProducerConfig{Addr: "tcp:" + tcp, PingInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor("the producer to connect", func() bool { return p.Stats().Connects == 1 })
	time.Sleep(2 * time.Second) // four idle timeouts
	for _, u := range lifecycle("kept", time.Now()) {
		p.Send(u)
	}
	c.waitStats("kept")
	p.Close(context.Background())
	if st := p.Stats(); st.Connects != 1 {
		t.Errorf("the pinging producer reconnected: %+v", st)
	}
	if n := c.stopped(); n["timed_out"] != 1 {
		t.Errorf("final counters %v, want the silent connection timed out", n)
	}
}

func producerConfig(addr string) transport.ProducerConfig {
	return transport.ProducerConfig{Addr: addr, Name: "test"}
}

// TestCollectStatsOutStalledReader: -stats-out into a FIFO nobody reads
// (the issue: the collector's workers blocked writing stats lines, updates
// stopped being recorded, and SIGINT never finished). Every update is
// still recorded, and collect exits within its drain bound, saying what
// the reader cost.
func TestCollectStatsOutStalledReader(t *testing.T) {
	dir := shortDir(t)
	fifo := filepath.Join(dir, "stats.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// Held open and never read: collect's open does not block, its
	// writes fill the pipe and stop.
	held, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	c := &collector{proc: start(t, noExport(), root, llmtrace(t), "collect", "-stats-out", fifo, "-stats-log", "0",
		"-listen", "unix:"+filepath.Join(dir, "c.sock"), "-http", "127.0.0.1:0")}
	base := "http://" + c.httpAddr()
	const posts, perPost = 4, 500
	client := &http.Client{Timeout: time.Minute}
	for p := range posts {
		var body []byte
		for i := range perPost {
			body = append(body, jsonBody(fmt.Sprintf("r-%d-%d", p, i))...)
		}
		resp, err := client.Post(base+"/v1/updates", "application/x-ndjson", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST %d with the stats reader stalled: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %d: %d", p, resp.StatusCode)
		}
	}
	client.CloseIdleConnections()
	c.signal(syscall.SIGINT)
	c.wait(45 * time.Second) // the drain is 10 s; a blocked writer never exits
	e := c.stderr.String()
	if n := logInt(e, "collector stopped", "recorded"); n != posts*perPost*10 {
		t.Errorf("recorded %d updates, want %d:\n%s", n, posts*perPost*10, e)
	}
	if !strings.Contains(e, "-stats-out") {
		t.Errorf("collect did not say what the stalled reader cost:\n%s", e)
	}
}
