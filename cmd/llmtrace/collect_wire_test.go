package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// The tests of this file drive the built binary, as a user runs it, with
// producers that stream the two sides of requests over the wire.

var (
	wireBinOnce sync.Once
	wireBin     string
	wireBinErr  error
)

// collectBinary builds cmd/llmtrace once per test binary.
func collectBinary(t *testing.T) string {
	t.Helper()
	wireBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "llmtrace-collect")
		if err != nil {
			wireBinErr = err
			return
		}
		wireBin = filepath.Join(dir, "llmtrace")
		if out, err := exec.Command("go", "build", "-o", wireBin, ".").CombinedOutput(); err != nil {
			wireBinErr = fmt.Errorf("building llmtrace: %v\n%s", err, out)
		}
	})
	if wireBinErr != nil {
		t.Fatal(wireBinErr)
	}
	return wireBin
}

// collectProc is a running `llmtrace collect` listening on a Unix socket,
// with -stats-out and -spans-out in its directory.
type collectProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	dir    string
	sock   string
}

func startCollectBinary(t *testing.T, args ...string) *collectProc {
	t.Helper()
	dir := shortDir(t)
	p := &collectProc{t: t, stderr: &lockedBuffer{}, done: make(chan struct{}), dir: dir, sock: filepath.Join(dir, "c.sock")}
	args = append([]string{"collect", "-listen", "unix:" + p.sock, "-stats-out", filepath.Join(dir, "stats.jsonl"),
		"-spans-out", filepath.Join(dir, "spans.jsonl"), "-stats-log", "0", "-v"}, args...)
	p.cmd = exec.Command(collectBinary(t), args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "LLMTRACE_") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = append(env, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none")
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("collect's stderr:\n%s", p.stderr.String())
		}
	})
	p.waitStderr("msg=listening")
	return p
}

// waitStderr waits until stderr holds s n times (once when n is omitted).
func (p *collectProc) waitStderr(s string, n ...int) {
	p.t.Helper()
	want := 1
	if len(n) > 0 {
		want = n[0]
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(p.stderr.String(), s) < want {
		if time.Now().After(deadline) {
			p.t.Fatalf("collect's stderr does not hold %q %d times:\n%s", s, want, p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// httpAddr is the address of collect's -http server.
func (p *collectProc) httpAddr() string {
	p.t.Helper()
	p.waitStderr(`msg="serving HTTP"`)
	for _, f := range strings.Fields(p.stderr.String()[strings.Index(p.stderr.String(), `msg="serving HTTP"`):]) {
		if a, ok := strings.CutPrefix(f, "addr="); ok {
			return a
		}
	}
	p.t.Fatal("no HTTP address")
	return ""
}

// term sends SIGTERM and waits for collect to exit cleanly; it returns the
// counters of its last log line.
func (p *collectProc) term() map[string]int64 {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("collect did not exit within 30 s of SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		p.t.Fatalf("collect exited %d", code)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), `msg="collector stopped"`) {
			continue
		}
		for _, f := range strings.Fields(sc.Text()) {
			if k, v, ok := strings.Cut(f, "="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[k] = n
				}
			}
		}
	}
	if len(out) == 0 {
		p.t.Fatalf("no final counters:\n%s", p.stderr.String())
	}
	return out
}

// stats reads -stats-out: request id → its finished requests' stats.
func (p *collectProc) stats() map[string][]map[string]any {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "stats.jsonl"))
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			p.t.Fatalf("%s: %v", l, err)
		}
		id, _ := m["request_id"].(string)
		out[id] = append(out[id], m)
	}
	return out
}

// dialStream opens a stream connection to collect's socket and writes b.
func (p *collectProc) dialStream(b []byte) net.Conn {
	p.t.Helper()
	c, err := net.Dial("unix", p.sock)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close() })
	if _, err := c.Write(b); err != nil {
		p.t.Fatal(err)
	}
	return c
}

// post sends body to collect's POST /v1/updates.
func (p *collectProc) post(addr string, body []byte) {
	p.t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/updates", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		p.t.Fatalf("POST /v1/updates: %d", resp.StatusCode)
	}
}

// near checks a RequestStats number, to the microsecond.
func near(t *testing.T, s map[string]any, key string, want float64) {
	t.Helper()
	v, ok := s[key].(float64)
	if !ok || v < want-1e-6 || v > want+1e-6 {
		t.Errorf("%s = %v, want %v", key, s[key], want)
	}
}

// monoJSON is a JSON update line stamped on the producer's monotonic clock.
func monoJSON(u otelstats.Update, monoNs int64) []byte {
	u.Time = time.Unix(1, 0)
	b := transport.AppendUpdateJSON(nil, &u) // {"request_id":…,"ts":1,…}\n
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	delete(m, "ts")
	m["mono_ts"] = json.RawMessage(fmt.Sprintf("%d.%09d", monoNs/1e9, monoNs%1e9))
	out, _ := json.Marshal(m)
	return append(out, '\n')
}

// TestCollectAlignAcrossStreams: with -align-clocks, a producer that
// reconnects — or an HTTP producer, whose every body is a stream with its
// HELLO — keeps the alignment its first HELLO measured. Measured again at
// each HELLO, the alignment moved by the difference of the HELLOs' delivery
// delays (here the first HELLO took 30 ms, the second none): the
// producer's later updates moved 26 ms back against its earlier ones, were
// rejected as time_backwards, and the request lost its end. "http-wall"
// is an HTTP producer of wall times alone (HELLOs without mono_ts).
func TestCollectAlignAcrossStreams(t *testing.T) {
	for _, via := range []string{"unix", "http", "http-wall"} {
		t.Run(via, func(t *testing.T) {
			args := []string{"-align-clocks"}
			if via != "unix" {
				args = append(args, "-http", "127.0.0.1:0")
			}
			p := startCollectBinary(t, args...)
			const mono0 = int64(1000 * time.Second) // the producer's monotonic clock at t0
			ms := func(n int) int64 { return mono0 + int64(n)*int64(time.Millisecond) }
			// The producer read its clocks for its first HELLO 30 ms ago:
			// the HELLO reached the collector 30 ms late.
			t0 := time.Now().Add(-30 * time.Millisecond).UnixNano()
			hello := func(at int) transport.Hello {
				return transport.Hello{Producer: "engine-7", WallNs: t0 + ms(at) - mono0, MonoNs: ms(at)}
			}
			id := "r-" + via
			type timed struct {
				u  otelstats.Update
				at int // ms after the first HELLO
			}
			first := []timed{
				{otelstats.Update{RequestID: id, Kind: otelstats.KindArrived, Model: "m"}, 0},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindInputProcessed, NumPromptTokens: 10}, 1},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindQueued}, 2},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindPrefilling, NumComputedTokens: 10}, 5},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindDecoding}, 10},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindDetokenized, NumNewTokens: 1}, 11},
			}
			second := []timed{
				{otelstats.Update{RequestID: id, Kind: otelstats.KindDecoding}, 32},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindDetokenized, NumNewTokens: 1}, 33},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideEngine, FinishReason: "stop"}, 34},
				{otelstats.Update{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideFrontend, FinishReason: "stop"}, 35},
			}
			stream := func(h transport.Hello, us []timed) []byte {
				if via == "http-wall" { // JSON lines, wall times only
					b := fmt.Appendf(nil, `{"type":"HELLO","producer":%q,"wall_ts":%d.%09d}`+"\n",
						h.Producer, h.WallNs/1e9, h.WallNs%1e9)
					for _, x := range us {
						x.u.Time = time.Unix(0, t0+ms(x.at)-mono0)
						b = transport.AppendUpdateJSON(b, &x.u)
					}
					return b
				}
				if via == "http" { // JSON lines, mono_ts
					b := fmt.Appendf(nil, `{"type":"HELLO","producer":%q,"wall_ts":%d.%09d,"mono_ts":%d.%09d}`+"\n",
						h.Producer, h.WallNs/1e9, h.WallNs%1e9, h.MonoNs/1e9, h.MonoNs%1e9)
					for _, x := range us {
						b = append(b, monoJSON(x.u, ms(x.at))...)
					}
					return b
				}
				b := transport.AppendHello(transport.AppendHeader(nil), h)
				for _, x := range us {
					b = transport.AppendUpdate(b, &x.u, transport.Stamp{Ns: ms(x.at), Mono: true})
				}
				return b
			}
			// The second HELLO is read at its producer's 31 ms: 5 ms from now.
			time.Sleep(5 * time.Millisecond)
			switch via {
			case "unix":
				c := p.dialStream(stream(hello(0), first))
				c.Close() // the connection drops; the producer reconnects
				p.waitStderr(`msg="stream ended"`)
				c = p.dialStream(stream(hello(31), second))
				c.Close()
				p.waitStderr(`msg="stream ended"`, 2)
			default:
				addr := p.httpAddr()
				p.post(addr, stream(hello(0), first))
				p.post(addr, stream(hello(31), second))
			}
			s := p.termOne(t, id, 10)
			if s["finish_reason"] != "stop" || s["num_output_tokens"] != float64(2) {
				t.Errorf("stats %v", s)
			}
			near(t, s, "e2e_latency_s", 0.035)
			near(t, s, "first_token_latency_s", 0.011)
			near(t, s, "queue_duration_s", 0.003)
			near(t, s, "decode_latency_s", 0.024)
		})
	}
}

// TestCollectCountsHeldRejections: an engine update that reaches collect
// before its request's ARRIVED is held; when the ARRIVED never comes it is
// rejected (unknown_request) after Record returned. collect's final
// counters count it rejected, not recorded: they said "recorded=2
// rejected=0" for two updates that were lost.
func TestCollectCountsHeldRejections(t *testing.T) {
	p := startCollectBinary(t, "-hold", "100ms")
	now := time.Now()
	var b []byte
	b = transport.AppendHeader(b)
	b = transport.AppendHello(b, transport.Hello{Producer: "engine", WallNs: now.UnixNano(), MonoNs: 1, Side: otelstats.SideEngine})
	for _, u := range []otelstats.Update{
		{RequestID: "orphan", Kind: otelstats.KindQueued, Side: otelstats.SideEngine, Time: now},
		{RequestID: "orphan", Kind: otelstats.KindPrefilling, Side: otelstats.SideEngine, NumComputedTokens: 4, Time: now.Add(time.Millisecond)},
	} {
		b = transport.AppendUpdate(b, &u, transport.Stamp{Ns: u.Time.UnixNano()})
	}
	p.dialStream(b).Close()
	p.waitStderr("no ARRIVED within the hold window", 2)
	cnt := p.term()
	if cnt["updates"] != 2 || cnt["recorded"] != 0 || cnt["rejected"] != 2 {
		t.Errorf("final counters %v: want the 2 held updates rejected, none recorded", cnt)
	}
}

// termOne stops collect, checks that all of its want updates were
// recorded, and returns the one request id's stats.
func (p *collectProc) termOne(t *testing.T, id string, want int64) map[string]any {
	t.Helper()
	cnt := p.term()
	if cnt["rejected"] != 0 || cnt["recorded"] != want {
		t.Errorf("final counters %v: want all %d updates recorded", cnt, want)
	}
	ss := p.stats()[id]
	if len(ss) != 1 {
		t.Fatalf("stats of %s: %v", id, ss)
	}
	return ss[0]
}

// newProducer is a transport.Producer to collect's socket, closed at the
// test's end.
func (p *collectProc) newProducer(cfg transport.ProducerConfig) *transport.Producer {
	p.t.Helper()
	cfg.Addr = "unix:" + p.sock
	pr, err := transport.NewProducer(cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = pr.Close(context.Background()) })
	return pr
}

// closeProducer flushes pr and waits until collect has read its stream to
// the end.
func (p *collectProc) closeProducer(pr *transport.Producer) {
	p.t.Helper()
	ended := strings.Count(p.stderr.String(), `msg="stream ended"`)
	if err := pr.Close(context.Background()); err != nil {
		p.t.Fatal(err)
	}
	if st := pr.Stats(); st.Sent != st.Queued {
		p.t.Fatalf("producer %+v: not everything was sent", st)
	}
	p.waitStderr(`msg="stream ended"`, ended+1)
}

// TestCollectEngineProducerFinished: a Producer configured as the engine
// side (ProducerConfig.Side) sends its FINISHED without naming a side, as
// the engine's updates of every other kind need none. It is the engine's
// FINISHED: the request waits for the frontend's, which ends it. It was
// sent as a FINISHED without a side — the frontend's on the wire — so the
// frontend's real FINISHED, and its last delivery, were rejected.
func TestCollectEngineProducerFinished(t *testing.T) {
	for _, enc := range []string{"binary", "json"} {
		t.Run(enc, func(t *testing.T) {
			p := startCollectBinary(t)
			fe := p.newProducer(transport.ProducerConfig{Name: "fe", Side: otelstats.SideFrontend, JSON: enc == "json"})
			en := p.newProducer(transport.ProducerConfig{Name: "en", Side: otelstats.SideEngine, JSON: enc == "json"})
			p.waitStderr(`msg="producer connected"`, 2)
			t0 := time.Now()
			ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
			id := "r-" + enc
			for _, u := range []otelstats.Update{
				{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"},
				{RequestID: id, Kind: otelstats.KindInputProcessed, Time: ms(1), NumPromptTokens: 10},
			} {
				fe.Send(u)
			}
			for _, u := range []otelstats.Update{
				{RequestID: id, Kind: otelstats.KindQueued, Time: ms(2)},
				{RequestID: id, Kind: otelstats.KindPrefilling, Time: ms(5), NumComputedTokens: 10},
				{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(10)},
				{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(20)},
				{RequestID: id, Kind: otelstats.KindFinished, Time: ms(21), FinishReason: "length"},
			} {
				en.Send(u)
			}
			p.closeProducer(en) // the engine's stream is read first
			for _, u := range []otelstats.Update{
				{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(11), NumNewTokens: 1},
				{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(22), NumNewTokens: 1},
				{RequestID: id, Kind: otelstats.KindFinished, Time: ms(23), FinishReason: "length"},
			} {
				fe.Send(u)
			}
			p.closeProducer(fe)
			s := p.termOne(t, id, 10)
			if s["finish_reason"] != "length" || s["num_output_tokens"] != float64(2) {
				t.Errorf("stats %v", s)
			}
			near(t, s, "e2e_latency_s", 0.023)
			near(t, s, "first_token_latency_s", 0.011)
			near(t, s, "queue_duration_s", 0.003)
		})
	}
}
