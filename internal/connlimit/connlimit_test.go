package connlimit

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs a server on a capped listener; release unblocks /block.
func serve(t *testing.T, max int) (*Listener, string, chan struct{}) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(nl, max)
	release := make(chan struct{})
	srv := &http.Server{ConnState: l.ConnState, ReadHeaderTimeout: time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				<-release
			}
			io.WriteString(w, "ok")
		})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, "http://" + nl.Addr().String(), release
}

func waitOpen(t *testing.T, l *Listener, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); l.Stats().Open != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("open %d, want %d", l.Stats().Open, n)
		}
	}
}

// TestSilentConnectionsMakeRoom: connections that never send a request
// fill the cap; a real client's request is still served, closing the
// oldest of them, and counted.
func TestSilentConnectionsMakeRoom(t *testing.T) {
	l, base, _ := serve(t, 3)
	var silent []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	waitOpen(t, l, 3)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 5 {
		resp, err := client.Get(base + "/")
		if err != nil {
			t.Fatalf("a client was locked out by silent connections: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("got %q", b)
		}
	}
	st := l.Stats()
	if st.Evicted < 1 || st.Refused != 0 || st.Open > 3 {
		t.Fatalf("stats %+v, want evictions, no refusal, at most 3 open", st)
	}
	silent[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest silent connection is still open")
	}
}

// TestBusyConnectionsAreKept: with every held connection serving a
// request, a new one is closed at once and counted; the busy ones finish.
func TestBusyConnectionsAreKept(t *testing.T) {
	l, base, release := serve(t, 2)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var bodies []io.ReadCloser
	for range 2 {
		resp, err := client.Get(base + "/block")
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
	}
	waitOpen(t, l, 2)
	if _, err := client.Get(base + "/"); err == nil {
		t.Error("a third connection was served past a cap of busy ones")
	}
	if st := l.Stats(); st.Refused < 1 || st.Evicted != 0 {
		t.Errorf("stats %+v, want a refusal and no eviction", st)
	}
	close(release)
	for _, b := range bodies {
		if got, _ := io.ReadAll(b); string(got) != "ok" {
			t.Errorf("a busy request was cut: %q", got)
		}
		b.Close()
	}
}
