package transport

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first n accepts with err.
type failingListener struct {
	net.Listener
	err error
	n   atomic.Int64
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.n.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", l.err)}
	}
	return l.Listener.Accept()
}

// TestHTTPAcceptErrorsBackOffAndGoOn: the HTTP listener's accept errors
// are counted and retried as a stream listener's are. net/http's Serve
// retries only those it takes for temporary (EMFILE) and returns on the
// rest — EPROTO and the network errors Linux's accept passes on from the
// peer, ENOBUFS, ENOMEM, EPERM from a firewall rule — which ended the
// Server's Run, and `llmtrace collect` with it.
func TestHTTPAcceptErrorsBackOffAndGoOn(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.EPROTO, syscall.ENOBUFS, syscall.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			e := newEnv(t, Config{})
			srv, err := NewServer(ServerConfig{Collector: Config{Tracker: e.tr}, HTTPAddr: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			ll := srv.httpL.(*limitListener)
			fl := &failingListener{Listener: ll.Listener, err: errno}
			fl.n.Store(3)
			ll.Listener = fl
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- srv.Run(ctx) }()

			t0 := time.Unix(1_700_000_000, 0).UTC()
			var body []byte
			for _, u := range lifecycle("after-"+errno.Error(), t0) {
				body = AppendUpdateJSON(body, &u)
			}
			c := &http.Client{Timeout: 20 * time.Second}
			resp, err := c.Post("http://"+srv.HTTPAddr().String()+"/v1/updates", "application/x-ndjson", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("POST after %v accept errors: %v", errno, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST: %d", resp.StatusCode)
			}
			select {
			case err := <-ran:
				t.Fatalf("Run returned %v", err)
			default:
			}
			if n := srv.Collector().Stats().AcceptErrors; n != 3 {
				t.Errorf("%d accept errors counted, want 3", n)
			}
			cancel()
			select {
			case err := <-ran:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return")
			}
			checkLifecycle(t, e.waitStat("after-"+errno.Error()), t0)
		})
	}
}
