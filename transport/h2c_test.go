package transport

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestHTTPH2C: the HTTP server takes HTTP/2 with prior knowledge (h2c)
// beside HTTP/1.1. Producers one after another reuse one h2c connection,
// within a cap of one; the token is checked per request; a body that
// stalls is cut at ReadTimeout and counted, as over HTTP/1.1; and a
// connection carries one body at a time, so a second one at once needs a
// connection of its own, which the cap refuses (with HTTP/2's default of
// 250 streams a connection, one connection would carry 250 bodies).
func TestHTTPH2C(t *testing.T) {
	const tok = "h2c-token"
	e := newEnv(t, Config{Token: tok})
	srv := runServer(t, ServerConfig{Collector: Config{Tracker: e.tr, Token: tok, MaxConns: 1}, HTTPAddr: "127.0.0.1:0",
		ReadTimeout: 300 * time.Millisecond})
	url := "http://" + srv.HTTPAddr().String() + "/v1/updates"
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &p}}
	defer h2c.CloseIdleConnections()
	post := func(client *http.Client, body io.Reader, auth string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, body)
		req.Header.Set("Authorization", "Bearer "+auth)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, nil
	}
	// One producer first: the connection is proven by its token, so it
	// keeps its place under the cap, and the others reuse it.
	if resp, err := post(h2c, bytes.NewReader(tokenStream("h2c-first", "", true)), tok); err != nil || resp.StatusCode != http.StatusAccepted || resp.ProtoMajor != 2 {
		t.Fatalf("the first producer over h2c: %v, %v; want HTTP/2 202", resp, err)
	}
	const producers = 8
	for i := range producers {
		resp, err := post(h2c, bytes.NewReader(tokenStream("h2c-"+strconv.Itoa(i), "", true)), tok)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusAccepted || resp.ProtoMajor != 2 {
			t.Errorf("producer %d: %s %d, want HTTP/2 202", i, resp.Proto, resp.StatusCode)
		}
	}
	if resp, err := post(h2c, bytes.NewReader(tokenStream("wrong", "", true)), "nope"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token over h2c: %v, %v; want 401", resp, err)
	}
	// A stalled body: the stream is cut, the connection serves on. While
	// it is open, a second body needs a second connection: refused.
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write(tokenStream("stalled", "", true)[:20])
	stalled := make(chan error, 1)
	go func() {
		resp, err := post(h2c, pr, tok)
		if err == nil && resp.StatusCode != http.StatusRequestTimeout {
			err = errors.New(resp.Status)
		}
		stalled <- err
	}()
	wait(t, "the stalled body's stream open", func() bool { return srv.Collector().Stats().ActiveStreams == 1 })
	if resp, err := post(h2c, bytes.NewReader(tokenStream("second", "", true)), tok); err == nil {
		t.Errorf("a second body at once over h2c at a cap of one connection: %s, want it refused", resp.Status)
	}
	if err := <-stalled; err != nil {
		t.Errorf("a stalled body: %v; want 408", err)
	}
	if n := srv.Collector().Stats().TimedOut; n != 1 {
		t.Errorf("%d streams timed out, want the stalled one", n)
	}
	// HTTP/1.1 still. A proven connection keeps its place under the cap
	// even idle, so the h2c one is closed first.
	h2c.CloseIdleConnections()
	wait(t, "the h2c connection's slot given back", func() bool { return srv.col.open.Load() == 0 })
	h1 := &http.Client{Transport: &http.Transport{}}
	defer h1.CloseIdleConnections()
	resp, err := post(h1, bytes.NewReader(tokenStream("h1", "", true)), tok)
	if err != nil || resp.StatusCode != http.StatusAccepted || resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1: %v, %v; want 202", resp, err)
	}
	const perStream = 10 // tokenStream's updates
	wait(t, "every accepted update recorded", func() bool { return srv.Collector().Stats().Updates == (producers+2)*perStream })
	if st := srv.Collector().Stats(); st.Refused == 0 || st.Unauthorized != 1 {
		t.Errorf("stats %+v, want the second body's connection refused and one unauthorized", st)
	}
}
