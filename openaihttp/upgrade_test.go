package openaihttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// TestProxyUpgradeOnTracedRoute: an upstream that switches protocols (101)
// for a request on a traced route gets its tunnel through the proxy, as on
// any other route, not a 502.
func TestProxyUpgradeOnTracedRoute(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(brw, buf); err == nil {
			c.Write(append([]byte("echo:"), buf...))
		}
	})
	h := newHarness(t, up, nil)
	u, _ := url.Parse(h.srv.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	c.Write([]byte("hello"))
	if b, _ := io.ReadAll(br); string(b) != "echo:hello" {
		t.Errorf("tunnel gave %q", b)
	}
	c.Close()
	h.waitStats(1) // the tunnel's end ends the request
}
