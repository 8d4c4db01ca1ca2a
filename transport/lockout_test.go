package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

const lockoutToken = "s3cret"

// pending is how many connections wait, not yet proven, to be evicted.
func (e *env) pending() int {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	return e.c.pending.Len()
}

// listenTCP serves a loopback TCP listener (asking for the token when the
// collector has one) and returns its address.
func (e *env) listenTCP() string {
	e.t.Helper()
	l, err := Listen(Addr{"tcp", "127.0.0.1:0"}, false)
	if err != nil {
		e.t.Fatal(err)
	}
	go e.c.Serve(l) // Close closes l and ends it
	return l.Addr().String()
}

// attacker is a peer that never presents the token: it sends first, then,
// when trickle is set, one byte of it every 20 ms until closed.
type attacker struct {
	name    string
	first   []byte
	trickle []byte
}

var attackers = []attacker{
	{name: "silent"},
	{name: "an open brace", first: []byte("{")},
	{name: "a trickled line", first: []byte(`{"request_id":"`), trickle: []byte("a")},
	{name: "JSON PINGs", first: []byte("\n"), trickle: []byte("\n")},
	{name: "a binary header", first: AppendHeader(nil)},
	{name: "a trickled frame", first: append(AppendHeader(nil), 0, 0, 0xff, 0xff, FrameUpdate), trickle: []byte("x")},
	{name: "a HELLO cut short", first: []byte(`{"type":"HELLO","wall_ts":1700000000,"token":"s3c`)},
}

// dialAttacker connects a and starts its trickle; closing the connection
// ends the trickle.
func dialAttacker(t *testing.T, addr string, a attacker, wg *sync.WaitGroup) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(a.first)
	if len(a.trickle) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				time.Sleep(20 * time.Millisecond)
				if _, err := c.Write(a.trickle); err != nil {
					return
				}
			}
		}()
	}
	return c
}

// sendAll writes b on its own TCP connection and waits for the collector
// to close it.
func sendAll(t *testing.T, addr string, b []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.Copy(io.Discard, c)
}

// lockedBuf is a log destination safe for concurrent writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// helloLen is the length of a tokenStream's header and HELLO.
func helloLen(b []byte, json bool) int {
	if json {
		return bytes.IndexByte(b, '\n') + 1
	}
	return headerLen + 4 + int(binary.BigEndian.Uint32(b[headerLen:]))
}

// closedByPeer reports whether the collector closed c (its read ends in
// EOF or a reset, not in c's own deadline).
func closedByPeer(c net.Conn, within time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestUnprovenCannotLockOut: connections that never present the token —
// silent, or sending and trickling bytes that are no HELLO with it — fill
// the cap, yet a producer with the token is admitted (the oldest of them
// evicted) and recorded whole; once it has presented the token, newcomers
// evict the others, never it.
func TestUnprovenCannotLockOut(t *testing.T) {
	for i, a := range attackers {
		t.Run(a.name, func(t *testing.T) {
			// No HelloTimeout: eviction alone must let the producer in.
			var logs lockedBuf
			e := newEnv(t, Config{MaxConns: 3, Token: lockoutToken, HelloTimeout: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			addr := e.listenTCP()
			var wg sync.WaitGroup
			defer wg.Wait()
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for range 3 {
				held = append(held, dialAttacker(t, addr, a, &wg))
				n := len(held)
				wait(t, "the attacker held", func() bool { return e.c.open.Load() == int64(n) })
			}
			time.Sleep(50 * time.Millisecond) // their bytes are read

			json := i%2 == 0
			sendAll(t, addr, tokenStream("first", lockoutToken, json))
			checkLifecycle(t, e.waitStat("first"), time.Unix(1_700_000_000, 0).UTC())
			if !closedByPeer(held[0], 20*time.Second) {
				t.Error("the oldest attacker was not evicted")
			}
			wait(t, "its end logged as evicted", func() bool { return strings.Contains(logs.String(), ErrEvicted.Error()) })
			if st := e.c.Stats(); st.Evicted != 1 || st.Refused != 0 {
				t.Errorf("stats %+v, want 1 evicted and none refused", st)
			}

			// A producer that has presented the token outlasts newcomers:
			// each evicts the oldest attacker instead.
			wait(t, "the first producer's slot freed", func() bool { return e.c.open.Load() == 2 })
			p, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			stream := tokenStream("second", lockoutToken, !json)
			n := helloLen(stream, !json)
			p.Write(stream[:n])
			// Its HELLO counted, it is proven.
			wait(t, "the producer proven", func() bool { return e.c.Stats().Hellos == 2 && e.pending() == 2 })
			for range 5 {
				held = append(held, dialAttacker(t, addr, a, &wg))
				wait(t, "the newcomer held", func() bool { return e.pending() == 2 && e.c.Stats().Evicted == int64(len(held)-2) })
			}
			if _, err := p.Write(stream[n:]); err != nil {
				t.Fatalf("the proven producer was closed: %v", err)
			}
			p.(*net.TCPConn).CloseWrite()
			checkLifecycle(t, e.waitStat("second"), time.Unix(1_700_000_000, 0).UTC())
			if st := e.c.Stats(); st.Evicted != 6 || st.Refused != 0 {
				t.Errorf("stats %+v, want 6 evicted and none refused", st)
			}
			if n := e.counter(MetricCollectorErrors, ErrorKey.String("evicted")); n != 6 {
				t.Errorf("evicted metric %d, want 6", n)
			}
		})
	}
}

// TestProvenNeverEvicted: with the cap full of producers that presented
// the token, whatever comes next is refused, and they deliver whole.
func TestProvenNeverEvicted(t *testing.T) {
	e := newEnv(t, Config{MaxConns: 3, Token: lockoutToken})
	addr := e.listenTCP()
	var producers [][]byte
	var conns []net.Conn
	for i := range 3 {
		id := fmt.Sprint("proven-", i)
		b := tokenStream(id, lockoutToken, false)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hello := helloLen(b, false)
		c.Write(b[:hello])
		producers = append(producers, b[hello:])
		conns = append(conns, c)
	}
	wait(t, "3 proven", func() bool { return e.c.Stats().Hellos == 3 && e.pending() == 0 })
	var wg sync.WaitGroup
	for i, a := range attackers {
		c := dialAttacker(t, addr, a, &wg)
		if !closedByPeer(c, 20*time.Second) {
			t.Errorf("%s: not refused", a.name)
		}
		c.Close()
		if n := e.c.Stats().Refused; n != int64(i+1) {
			t.Errorf("%s: %d refused, want %d", a.name, n, i+1)
		}
	}
	wg.Wait()
	for i, c := range conns {
		if _, err := c.Write(producers[i]); err != nil {
			t.Fatalf("proven-%d was closed: %v", i, err)
		}
		c.(*net.TCPConn).CloseWrite()
	}
	for i := range conns {
		checkLifecycle(t, e.waitStat(fmt.Sprint("proven-", i)), time.Unix(1_700_000_000, 0).UTC())
	}
	if n := e.c.Stats().Evicted; n != 0 {
		t.Errorf("%d evicted, want none", n)
	}
}

// TestHelloTimeout: a connection that must present the token and has not
// within HelloTimeout is closed, whatever it trickles; a producer that has
// presented it may then idle, and trusted listeners have no such bound.
func TestHelloTimeout(t *testing.T) {
	const hello = 200 * time.Millisecond
	for _, tc := range []struct {
		attacker
		timeout      time.Duration // Config.HelloTimeout
		unix         bool          // on the trusted Unix socket
		closed       bool
		timedOut     int64
		unauthorized int64
	}{
		{attacker: attackers[0], timeout: hello, closed: true, timedOut: 1},
		{attacker: attackers[2], timeout: hello, closed: true, unauthorized: 1}, // its partial line is no HELLO
		{attacker: attackers[3], timeout: hello, closed: true, timedOut: 1},
		{attacker: attackers[5], timeout: hello, closed: true, timedOut: 1},
		{attacker: attackers[0], timeout: -1},
		{attacker: attackers[3], timeout: -1},
		{attacker: attackers[0], timeout: hello, unix: true},
		{attacker: attackers[3], timeout: hello, unix: true},
	} {
		name := fmt.Sprintf("%s, HelloTimeout %v, unix %v", tc.name, tc.timeout, tc.unix)
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Config{Token: lockoutToken, HelloTimeout: tc.timeout, IdleTimeout: time.Minute})
			addr := e.listenTCP()
			var wg sync.WaitGroup
			defer wg.Wait()
			var c net.Conn
			if tc.unix {
				c = e.dial()
				c.Write(tc.first)
			} else {
				c = dialAttacker(t, addr, tc.attacker, &wg)
			}
			defer c.Close()
			start := time.Now()
			switch {
			case !tc.closed:
				if closedByPeer(c, 3*hello) {
					t.Fatal("closed")
				}
			case !closedByPeer(c, 20*time.Second):
				t.Fatal("not closed")
			case time.Since(start) < hello-50*time.Millisecond:
				// Only the lower bound: a busy machine closes it late.
				t.Errorf("closed after %v, before its HelloTimeout %v", time.Since(start), hello)
			}
			c.Close()
			wait(t, "the stream to end", func() bool { return !tc.closed || e.c.Stats().ActiveStreams == 0 })
			if st := e.c.Stats(); st.TimedOut != tc.timedOut || st.Unauthorized != tc.unauthorized {
				t.Errorf("stats %+v, want %d timed out, %d unauthorized", st, tc.timedOut, tc.unauthorized)
			}
		})
	}
}

// TestHelloTimeoutSparesTheProven: once its HELLO carried the token, a
// producer may stay quiet well past HelloTimeout.
func TestHelloTimeoutSparesTheProven(t *testing.T) {
	const hello = 100 * time.Millisecond
	e := newEnv(t, Config{Token: lockoutToken, HelloTimeout: hello, IdleTimeout: time.Minute})
	addr := e.listenTCP()
	for _, json := range []bool{false, true} {
		id := fmt.Sprint("quiet-json=", json)
		b := tokenStream(id, lockoutToken, json)
		n := helloLen(b, json)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(b[:n])
		if closedByPeer(c, 5*hello) {
			t.Fatalf("%s: closed while quiet", id)
		}
		if _, err := c.Write(b[n:]); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		checkLifecycle(t, e.waitStat(id), time.Unix(1_700_000_000, 0).UTC())
	}
	if st := e.c.Stats(); st.TimedOut != 0 || st.Unauthorized != 0 {
		t.Errorf("stats %+v, want no timeout", st)
	}
}

// TestHTTPUnprovenEvicted: a Server's HTTP connections are evictable, as
// streams are, until a request on them presents the token (a bearer
// header, or the body's HELLO); a proven keep-alive connection outlasts
// newcomers, and with every connection proven a newcomer is refused.
func TestHTTPUnprovenEvicted(t *testing.T) {
	tr := newEnv(t, Config{}).tr
	srv := runServer(t, ServerConfig{Collector: Config{Tracker: tr, Token: lockoutToken, MaxConns: 2}, HTTPAddr: "127.0.0.1:0"})
	col, addr := srv.Collector(), srv.HTTPAddr().String()
	// dial connects and waits until the collector holds open connections,
	// pending of them not proven, and has evicted evicted.
	dial := func(open, pending, evicted int) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wait(t, "the connection held", func() bool {
			col.mu.Lock()
			defer col.mu.Unlock()
			return col.open.Load() == int64(open) && col.pending.Len() == pending && col.Stats().Evicted == int64(evicted)
		})
		return c
	}
	post := func(c net.Conn, body []byte, auth string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/updates", bytes.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		if err := req.Write(c); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	bearer := dial(1, 1, 0)
	defer bearer.Close()
	if code := post(bearer, tokenStream("bearer-1", "", true), lockoutToken); code != http.StatusAccepted {
		t.Fatalf("bearer: %d", code)
	}
	silent := dial(2, 1, 0)
	defer silent.Close()
	third := dial(2, 1, 1) // evicts the silent one, not the proven one
	defer third.Close()
	if !closedByPeer(silent, 20*time.Second) {
		t.Error("the silent connection was not evicted")
	}
	// The body's HELLO proves the connection too: the newcomer takes the
	// place of the one before it.
	hello := dial(2, 1, 2)
	defer hello.Close()
	if code := post(hello, tokenStream("hello", lockoutToken, false), ""); code != http.StatusAccepted {
		t.Fatalf("hello: %d", code)
	}
	if !closedByPeer(third, 20*time.Second) {
		t.Error("the third connection was not evicted")
	}
	// Both held connections are proven: the next one is refused, and the
	// first still posts.
	refused, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	if !closedByPeer(refused, 20*time.Second) {
		t.Error("a connection beyond two proven ones was served")
	}
	if code := post(bearer, tokenStream("bearer-2", "", true), lockoutToken); code != http.StatusAccepted {
		t.Errorf("the proven keep-alive connection: %d", code)
	}
	if st := col.Stats(); st.Evicted != 2 || st.Refused != 1 || st.Updates != 30 {
		t.Errorf("stats %+v, want 2 evicted, 1 refused, 30 updates", st)
	}
}
