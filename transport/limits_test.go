package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// emfileListener fails its first n accepts as a process at its
// file-descriptor limit does.
type emfileListener struct {
	net.Listener
	n atomic.Int64
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptErrorsBackOffAndGoOn: at the fd limit accept fails with EMFILE;
// the collector counts it, backs off and serves the next connection
// instead of returning (which ended `llmtrace collect`).
func TestAcceptErrorsBackOffAndGoOn(t *testing.T) {
	e := newEnv(t, Config{})
	inner, err := Listen(Addr{"tcp", "127.0.0.1:0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	l := &emfileListener{Listener: inner}
	l.n.Store(5)
	served := make(chan error, 1)
	go func() { served <- e.c.Serve(l) }()
	conn, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := AppendHeader(nil)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	for _, u := range lifecycle("after-emfile", t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	conn.Write(b)
	conn.Close()
	checkLifecycle(t, e.waitStat("after-emfile"), t0)
	if n := e.c.Stats().AcceptErrors; n != 5 {
		t.Errorf("%d accept errors counted, want 5", n)
	}
	if n := e.counter(MetricCollectorErrors, ErrorKey.String("accept")); n != 5 {
		t.Errorf("metric counts %d accept errors, want 5", n)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
	e.c.Close(context.Background())
	if err := <-served; err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

// TestMaxConns: at the cap, with every producer held proven (its HELLO
// delivered), further connections are closed at once and counted; the
// ones held keep working, and a slot freed is reused.
func TestMaxConns(t *testing.T) {
	e := newEnv(t, Config{MaxConns: 3})
	var held []net.Conn
	for range 3 {
		c := e.dial()
		c.Write(AppendHello(AppendHeader(nil), Hello{WallNs: 1}))
		held = append(held, c)
	}
	wait(t, "3 streams", func() bool { return e.c.Stats().ActiveStreams == 3 })
	wait(t, "3 proven", func() bool { return e.pending() == 0 })
	for range 4 {
		c := e.dial()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("a connection beyond the cap was served")
		}
		c.Close()
	}
	if st := e.c.Stats(); st.Refused != 4 || st.ActiveStreams != 3 {
		t.Errorf("stats %+v, want 4 refused and 3 active", st)
	}
	if n := e.counter(MetricCollectorErrors, ErrorKey.String("refused")); n != 4 {
		t.Errorf("refused metric %d", n)
	}
	// The held connections still deliver (their header went first).
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var b []byte
	for _, u := range lifecycle("held", t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	held[0].Write(b)
	held[0].Close()
	checkLifecycle(t, e.waitStat("held"), t0)
	// The slot itself, not the stream count: a stream ends (ActiveStreams)
	// a moment before its connection's slot is given back, and a dial in
	// between is refused.
	wait(t, "a slot to free", func() bool { return e.c.Stats().ActiveStreams == 2 && e.c.open.Load() == 2 })
	goodStream(t, e, "reused")
	e.waitStat("reused")
	for _, c := range held[1:] {
		c.Close()
	}
}

// TestMaxConnsEvictsSilent: connections that never send a byte cannot
// lock producers out: at the cap a new connection closes the oldest silent
// one (counted evicted), and its stream is recorded whole; a producer that
// has delivered its HELLO is never evicted.
func TestMaxConnsEvictsSilent(t *testing.T) {
	e := newEnv(t, Config{MaxConns: 3})
	spoken := e.dial()
	spoken.Write(AppendHello(AppendHeader(nil), Hello{WallNs: 1}))
	defer spoken.Close()
	wait(t, "it spoke", func() bool { return e.c.Stats().ActiveStreams == 1 && e.pending() == 0 })
	var silent []net.Conn
	for range 2 {
		silent = append(silent, e.dial())
	}
	wait(t, "3 streams", func() bool { return e.c.Stats().ActiveStreams == 3 })
	for i := range 3 {
		id := fmt.Sprintf("producer-%d", i)
		goodStream(t, e, id)
		e.waitStat(id)
	}
	// The first producer took the oldest silent connection's slot; the
	// others found a slot freed by an ended stream, or, while that stream's
	// goroutine was still ending, took the other silent one's.
	st := e.c.Stats()
	if st.Evicted < 1 || st.Evicted > 2 || st.Refused != 0 {
		t.Errorf("stats %+v, want one or two silent connections evicted and none refused", st)
	}
	if n := e.counter(MetricCollectorErrors, ErrorKey.String("evicted")); n != st.Evicted {
		t.Errorf("evicted metric %d, stats %d", n, st.Evicted)
	}
	silent[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the oldest silent connection was not closed: %v", err)
	}
	for _, c := range silent {
		c.Close()
	}
	// The one that spoke still delivers.
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var b []byte
	for _, u := range lifecycle("spoken", t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	spoken.Write(b)
	spoken.Close()
	checkLifecycle(t, e.waitStat("spoken"), t0)
}

// TestIdleTimeout: a connection that sends nothing is closed after
// IdleTimeout and counted; one that pings stays open.
func TestIdleTimeout(t *testing.T) {
	e := newEnv(t, Config{IdleTimeout: 300 * time.Millisecond})
	silent := e.dial()
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from the collector")
	}
	wait(t, "the timeout counted", func() bool { return e.c.Stats().TimedOut == 1 })

	// A producer that only pings is kept: its stream is open well past
	// several idle timeouts, then delivers.
	p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, Name: "pinger", PingInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	wait(t, "the producer to connect", func() bool { return p.Stats().Connects == 1 })
	time.Sleep(time.Second) // three idle timeouts; pings keep it open
	t0 := time.Now()
	for _, u := range lifecycle("pinged", t0) {
		p.Send(u)
	}
	checkLifecycleTimes(t, e.waitStat("pinged"))
	if st := p.Stats(); st.Connects != 1 || st.Lost != 0 {
		t.Errorf("producer %+v: the pinging connection was dropped", st)
	}
	if n := e.c.Stats().TimedOut; n != 1 {
		t.Errorf("%d timeouts, want only the silent connection's", n)
	}
}

// tokenStream is a complete request's stream opened by a HELLO with tok
// (none when empty), in either encoding.
func tokenStream(id, tok string, json bool) []byte {
	t0 := time.Unix(1_700_000_000, 0).UTC()
	h := Hello{Producer: "p-" + id, WallNs: t0.UnixNano(), MonoNs: 1, Token: tok}
	if json {
		b := []byte(`{"type":"HELLO","producer":"x","wall_ts":1700000000,"mono_ts":1`)
		if tok != "" {
			b = append(b, `,"token":"`+tok+`"`...)
		}
		b = append(b, "}\n"...)
		for _, u := range lifecycle(id, t0) {
			b = AppendUpdateJSON(b, &u)
		}
		return b
	}
	b := AppendHello(AppendHeader(nil), h)
	for _, u := range lifecycle(id, t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	return b
}

// TestTokenOnTCP: with a token, a TCP stream must open with a HELLO
// carrying it, in both encodings; Unix sockets are trusted.
func TestTokenOnTCP(t *testing.T) {
	const tok = "s3cret-token"
	e := newEnv(t, Config{Token: tok})
	l, err := Listen(Addr{"tcp", "127.0.0.1:0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	go e.c.Serve(l)
	send := func(b []byte) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(b)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		io.Copy(io.Discard, c) // the collector closes its end
		c.Close()
	}
	unauthorized := 0
	for _, enc := range []bool{false, true} {
		name := map[bool]string{false: "binary", true: "json"}[enc]
		send(tokenStream(name+"-ok", tok, enc))
		e.waitStat(name + "-ok")
		for i, bad := range []string{"", "wrong-token!", tok + "x"} {
			send(tokenStream(fmt.Sprint(name, "-bad", i), bad, enc))
			unauthorized++
			wait(t, "unauthorized counted", func() bool { return e.c.Stats().Unauthorized == int64(unauthorized) })
		}
	}
	// An update before any HELLO is no way in either.
	early := AppendHeader(nil)
	for _, u := range lifecycle("x", time.Unix(1_700_000_000, 0)) {
		early = AppendUpdate(early, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	early = AppendHello(early, Hello{WallNs: 1, Token: tok})
	send(early)
	unauthorized++
	wait(t, "unauthorized counted", func() bool { return e.c.Stats().Unauthorized == int64(unauthorized) })
	time.Sleep(50 * time.Millisecond)
	for id := range e.stats {
		if strings.Contains(id, "bad") || id == "x" {
			t.Errorf("%s was recorded without the token", id)
		}
	}
	if n := e.counter(MetricCollectorErrors, ErrorKey.String("unauthorized")); n != int64(unauthorized) {
		t.Errorf("unauthorized metric %d, want %d", n, unauthorized)
	}
	// The Unix socket needs none.
	goodStream(t, e, "unix-trusted")
	e.waitStat("unix-trusted")

	// A Producer with the token gets in over TCP, in both encodings.
	for _, js := range []bool{false, true} {
		p, err := NewProducer(ProducerConfig{Addr: "tcp:" + l.Addr().String(), Token: tok, JSON: js})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprint("producer-json=", js)
		for _, u := range lifecycle(id, time.Now()) {
			p.Send(u)
		}
		checkLifecycleTimes(t, e.waitStat(id))
		p.Close(context.Background())
	}
}

// runServer runs a Server of cfg until the test ends, and fails the test
// if it does not start or ends with an error.
func runServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	})
	return srv
}

// TestTokenOnHTTP: POST /v1/updates with the token as a bearer header, or
// in the body's HELLO; without it 401 and nothing recorded.
func TestTokenOnHTTP(t *testing.T) {
	const tok = "http-token"
	e := newEnv(t, Config{Token: tok})
	srv := runServer(t, ServerConfig{Collector: Config{Tracker: e.tr, Token: tok}, HTTPAddr: "127.0.0.1:0"})
	url := "http://" + srv.HTTPAddr().String() + "/v1/updates"
	post := func(body []byte, auth string) int {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st StreamStats
		json.NewDecoder(resp.Body).Decode(&st)
		return resp.StatusCode
	}
	defer http.DefaultClient.CloseIdleConnections()
	for _, tc := range []struct {
		id   string
		body []byte
		auth string
		want int
	}{
		{"bearer", tokenStream("bearer", "", true), "Bearer " + tok, http.StatusAccepted},
		{"hello", tokenStream("hello", tok, false), "", http.StatusAccepted},
		{"none", tokenStream("none", "", true), "", http.StatusUnauthorized},
		{"wrong-bearer", tokenStream("wrong-bearer", tok, true), "Bearer nope", http.StatusUnauthorized},
		{"wrong-hello", tokenStream("wrong-hello", "nope", false), "", http.StatusUnauthorized},
	} {
		if got := post(tc.body, tc.auth); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.id, got, tc.want)
		}
	}
	// The accepted bodies are recorded by the server's own collector.
	wait(t, "two accepted", func() bool { return srv.Collector().Stats().Updates == 20 })
	if n := srv.Collector().Stats().Unauthorized; n != 3 {
		t.Errorf("%d unauthorized, want 3", n)
	}
}

// TestServerHTTPLoopbackRule: -http follows -listen tcp's rule.
func TestServerHTTPLoopbackRule(t *testing.T) {
	tr, err := otelstats.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		_, err := NewServer(ServerConfig{Collector: Config{Tracker: tr}, HTTPAddr: addr})
		if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("HTTPAddr %q: %v, want ErrNotLoopback", addr, err)
		}
	}
	srv, err := NewServer(ServerConfig{Collector: Config{Tracker: tr}, HTTPAddr: ":0", AllowRemote: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
}

// TestServerHTTPLimits: the HTTP server has its timeouts and header cap,
// and its connections count against MaxConns.
func TestServerHTTPLimits(t *testing.T) {
	tr, err := otelstats.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	srv, err := NewServer(ServerConfig{Collector: Config{Tracker: tr, MaxConns: 2}, HTTPAddr: "127.0.0.1:0",
		ReadHeaderTimeout: 100 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, MaxHeaderBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if s := srv.srv; s.ReadTimeout != 300*time.Millisecond || s.IdleTimeout != DefaultHTTPIdleTimeout ||
		s.WriteTimeout != DefaultHTTPWriteTimeout || s.MaxHeaderBytes != 4096 || s.ReadHeaderTimeout != 100*time.Millisecond {
		t.Errorf("http.Server limits %v %v %v %v %v", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout, s.MaxHeaderBytes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- srv.Run(ctx) }()
	addr := srv.HTTPAddr().String()
	// A client that never finishes its header is cut off.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	slow.Write([]byte("POST /v1/updates HTTP/1.1\r\nHost: x\r\n"))
	slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.Copy(io.Discard, slow)
	slow.Close()
	// A body that stalls is cut at ReadTimeout and counted.
	trickle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	trickle.Write([]byte("POST /v1/updates HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"request_id\""))
	trickle.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.Copy(io.Discard, trickle)
	trickle.Close()
	wait(t, "the stalled body counted", func() bool { return srv.Collector().Stats().TimedOut == 1 })
	// Two silent connections fill the cap; a third closes the older
	// (TestHTTPUnprovenEvicted has the rest of the rule).
	a, _ := net.Dial("tcp", addr)
	wait(t, "one conn held", func() bool { return srv.col.open.Load() == 1 })
	b, _ := net.Dial("tcp", addr)
	wait(t, "two conns held", func() bool { return srv.col.open.Load() == 2 })
	c, _ := net.Dial("tcp", addr)
	a.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := a.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the oldest silent connection was not evicted: %v", err)
	}
	a.Close()
	if st := srv.Collector().Stats(); st.Evicted != 1 || st.Refused != 0 {
		t.Errorf("stats %+v, want 1 evicted, none refused", st)
	}
	// A header over the cap is refused by net/http with 431.
	a = c
	a.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8192) + "\r\n\r\n"))
	a.SetReadDeadline(time.Now().Add(20 * time.Second))
	line := make([]byte, 12)
	io.ReadFull(a, line)
	if !strings.HasPrefix(string(line), "HTTP/1.1 431") {
		t.Errorf("oversized header answered %q", line)
	}
	a.Close()
	b.Close()
	cancel()
	if err := <-ran; err != nil {
		t.Error(err)
	}
	if n := srv.col.open.Load(); n != 0 {
		t.Errorf("%d connection slots still held after Run", n)
	}
}

// TestHelloFieldsRoundTrip: side and token survive the binary HELLO, and
// a HELLO without them (the version-1 form) still decodes.
func TestHelloFieldsRoundTrip(t *testing.T) {
	for _, h := range []Hello{
		{Producer: "e", WallNs: 5, MonoNs: 6, Side: otelstats.SideEngine, Token: "t"},
		{Producer: "f", WallNs: 5, MonoNs: 6, Side: otelstats.SideFrontend},
		{Producer: "", WallNs: 5, MonoNs: 0},
	} {
		f, _, err := DecodeFrame(AppendHello(nil, h), DefaultMaxFrame)
		if err != nil || f.Hello != h {
			t.Errorf("%+v: decoded %+v, %v", h, f.Hello, err)
		}
	}
	// A bad side is malformed.
	b := AppendHello(nil, Hello{WallNs: 5})
	b = append(b, helloSide, 7)
	b[3] += 2
	if _, _, err := DecodeFrame(b, DefaultMaxFrame); !errors.Is(err, ErrMalformed) {
		t.Errorf("side 7: %v", err)
	}
	// PING decodes as a frame of its own type and is skipped by streams.
	f, n, err := DecodeFrame(AppendPing(nil), DefaultMaxFrame)
	if err != nil || f.Type != FramePing || n != 5 {
		t.Errorf("PING: %+v %d %v", f, n, err)
	}
}

// A HELLO's unknown string field is skipped whatever its length, as the
// doc says of fields a later version adds: the 256-byte cap is the
// token's. A 300-byte one made the whole HELLO malformed, and the stream's
// monotonic times went unanchored (no_anchor).
func TestHelloSkipsLongUnknownField(t *testing.T) {
	h := Hello{Producer: "e", WallNs: 5, MonoNs: 6, Side: otelstats.SideEngine, Token: "t"}
	b := AppendHello(nil, h)
	b = append(b, 0x41, 0xAC, 0x02) // string field 0x41, 300 bytes
	b = append(b, strings.Repeat("x", 300)...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	f, _, err := DecodeFrame(b, DefaultMaxFrame)
	if err != nil || f.Hello != h {
		t.Errorf("decoded %+v, %v; want %+v", f.Hello, err, h)
	}
	long := AppendHello(nil, Hello{WallNs: 5})
	long = append(long, helloToken, 0xAC, 0x02) // a 300-byte token
	long = append(long, strings.Repeat("x", 300)...)
	binary.BigEndian.PutUint32(long, uint32(len(long)-4))
	if _, _, err := DecodeFrame(long, DefaultMaxFrame); !errors.Is(err, ErrMalformed) {
		t.Errorf("a 300-byte token: %v, want malformed", err)
	}
}
