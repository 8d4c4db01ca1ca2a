package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// h2cClient speaks HTTP/2 over cleartext TCP with prior knowledge only, as
// Envoy or a gRPC-style upstream does: it never falls back to HTTP/1.1.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// heldUpstream streams a chat completion: its first content chunk, then —
// once release yields — the rest. A client that reads the first chunk
// while the upstream holds the rest proves the proxy streamed it on.
func heldUpstream(t *testing.T, release <-chan struct{}) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"llama","object":"model"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{`{"choices":[{"delta":{"role":"assistant"}}]}`, `{"choices":[{"delta":{"content":"a"}}]}`} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		for _, c := range []string{`{"choices":[{"delta":{"content":"b"}}]}`, `{"choices":[{"delta":{"content":"c"},"finish_reason":"stop"}]}`, `[DONE]`} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// streamChat posts a streamed chat completion and returns the response
// once its first content chunk has been read, with the reader positioned
// after it.
func streamChat(t *testing.T, client *http.Client, addr string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			resp.Body.Close()
			t.Fatalf("before the first content chunk: %v", err)
		}
		if strings.Contains(line, `"content":"a"`) {
			return resp, br
		}
	}
}

// streamChatOnceAdmitted is streamChat at a cap of one connection whose
// holder the client has just closed: until the server has marked that
// connection idle (it does so after the response's last byte, which the
// client may read first) a newcomer is refused, so a refused attempt is
// tried again (on a request the proxy does not trace); what the test
// asserts comes after.
func streamChatOnceAdmitted(t *testing.T, client *http.Client, addr string) (*http.Response, *bufio.Reader) {
	t.Helper()
	for range 200 {
		resp, err := client.Get("http://" + addr + "/v1/models") // the connection the stream then uses
		if err != nil {
			client.CloseIdleConnections()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		return streamChat(t, client, addr)
	}
	t.Fatal("the h2c client was never admitted")
	return nil, nil
}

// TestProxyH2C: the proxy serves HTTP/2 with prior knowledge beside
// HTTP/1.1 on one listener, and streams over either: the client reads the
// first content chunk while the upstream still holds the rest, then gets
// the rest. The request is traced to its end.
func TestProxyH2C(t *testing.T) {
	for _, c := range []struct {
		name   string
		client *http.Client
		major  int
	}{
		{"h2c", h2cClient(), 2},
		{"HTTP/1.1", &http.Client{Transport: &http.Transport{}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			statsFile := filepath.Join(t.TempDir(), "stats.jsonl")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr lockedBuffer
			release := make(chan struct{})
			up := heldUpstream(t, release)
			addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-models", "llama", "-stats-log", "0", "-stats-out", statsFile)
			defer c.client.CloseIdleConnections()
			resp, br := streamChat(t, c.client, addr)
			if resp.ProtoMajor != c.major {
				t.Errorf("the response came over %s, want major %d", resp.Proto, c.major)
			}
			// The first chunk is here and the upstream has not sent the
			// rest: the proxy streamed it on.
			close(release)
			rest, err := io.ReadAll(br)
			resp.Body.Close()
			if err != nil || !strings.Contains(string(rest), `"content":"c"`) || !strings.Contains(string(rest), "[DONE]") {
				t.Errorf("the rest of the stream %q, %v", rest, err)
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			stats := readStats(t, statsFile)
			if len(stats) != 1 {
				t.Fatalf("%d requests traced, want 1; stderr:\n%s", len(stats), stderr.String())
			}
			for id, s := range stats {
				if s["finish_reason"] != "stop" || s["num_output_tokens"] != float64(3) {
					t.Errorf("%s: %v, want stop with 3 tokens", id, s)
				}
			}
		})
	}
}

// h2cPreface opens an HTTP/2 connection by prior knowledge: the client
// preface, an empty SETTINGS frame and a PING (RFC 9113 §3.4, §6.5, §6.7).
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
	"\x00\x00\x00\x04\x00\x00\x00\x00\x00" +
	"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x00\x00"

// HTTP/2 frame types (RFC 9113 §6).
const (
	framePing   = 0x6
	frameGoAway = 0x7
)

// dialH2C opens an HTTP/2 connection to addr that sends no request. It
// returns once the server acknowledged its PING: the server has read the
// preface, and reported the connection idle to ConnState before that.
func dialH2C(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, h2cPreface); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	defer c.SetReadDeadline(time.Time{})
	for {
		typ, flags, err := readFrame(c)
		if err != nil {
			t.Fatalf("before the PING's ack: %v", err)
		}
		if typ == framePing && flags&0x1 != 0 {
			return c
		}
	}
}

// readFrame reads one HTTP/2 frame of c and returns its type and flags.
func readFrame(c net.Conn) (typ, flags byte, err error) {
	hdr := make([]byte, 9)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return 0, 0, err
	}
	_, err = io.CopyN(io.Discard, c, int64(hdr[0])<<16|int64(hdr[1])<<8|int64(hdr[2]))
	return hdr[3], hdr[4], err
}

// framesUntilClosed reads c's HTTP/2 frames until the server closes it and
// returns their types; a minute without the close is an error.
func framesUntilClosed(c net.Conn) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	var types []byte
	for {
		typ, _, err := readFrame(c)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return types, fmt.Errorf("the connection is still open (frames %v): %w", types, err)
		case err != nil:
			return types, nil
		}
		types = append(types, typ)
	}
}

// TestProxyH2CLimits: -idle-timeout and -max-conns hold HTTP/2
// connections as HTTP/1.1 ones. An idle h2c connection is closed at the
// idle timeout, with a GOAWAY; at the cap, an idle one is evicted for a
// newcomer, and one whose stream is running is not: the newcomer is
// refused, and the stream runs to its end.
func TestProxyH2CLimits(t *testing.T) {
	t.Run("-idle-timeout", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stderr lockedBuffer
		up := heldUpstream(t, nil)
		addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-models", "llama", "-stats-log", "0", "-idle-timeout", "200ms")
		types, err := framesUntilClosed(dialH2C(t, addr))
		if err != nil {
			t.Fatal(err)
		}
		if len(types) == 0 || types[len(types)-1] != frameGoAway {
			t.Errorf("frames %v before the close, want a GOAWAY (7) last", types)
		}
		cancel()
		<-done
	})
	t.Run("-max-conns", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stderr lockedBuffer
		release := make(chan struct{})
		up := heldUpstream(t, release)
		addr, done := startProxy(ctx, t, &stderr, "-upstream", up.URL, "-models", "llama", "-stats-log", "0", "-max-conns", "1", "-idle-timeout", "0")
		// An idle h2c connection makes room for a newcomer.
		idle := dialH2C(t, addr)
		h1 := &http.Client{Transport: &http.Transport{}}
		resp, err := h1.Get("http://" + addr + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h1.CloseIdleConnections()
		if _, err := framesUntilClosed(idle); err != nil {
			t.Errorf("the idle h2c connection was not evicted: %v", err)
		}
		// A busy one is not. The h2c client's connection takes the place
		// of the HTTP/1.1 one, closed by the client or, still idle on the
		// server's side, evicted.
		client := h2cClient()
		defer client.CloseIdleConnections()
		resp, br := streamChatOnceAdmitted(t, client, addr)
		defer resp.Body.Close()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Errorf("the newcomer at a cap of busy connections got an answer (%d bytes, %v)", n, err)
		}
		// Nor does the busy connection carry a second request at once: one
		// stream a connection (httpproto.Configure), so -max-conns bounds the
		// requests served at once as over HTTP/1.1.
		if resp2, err := client.Get("http://" + addr + "/v1/models"); err == nil {
			resp2.Body.Close()
			t.Errorf("a second request at once over h2c at a cap of one busy connection: %s, want it refused", resp2.Status)
		}
		close(release)
		if rest, err := io.ReadAll(br); err != nil || !strings.Contains(string(rest), "[DONE]") {
			t.Errorf("the running stream: %q, %v", rest, err)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if !regexp.MustCompile(`evicted_idle=[1-9]\d* refused=[1-9]`).MatchString(stderr.String()) {
			t.Errorf("stderr does not count the eviction and the refusal:\n%s", stderr.String())
		}
	})
}
