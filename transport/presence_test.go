package transport

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// sideUpdates splits lifecycle(id, t0) by side.
func sideUpdates(id string, t0 time.Time) (frontend, engine []otelstats.Update) {
	for _, u := range lifecycle(id, t0) {
		switch u.Kind {
		case otelstats.KindQueued, otelstats.KindPrefilling, otelstats.KindDecoding:
			engine = append(engine, u)
		case otelstats.KindFinished:
			if u.Side == otelstats.SideEngine {
				engine = append(engine, u)
			} else {
				frontend = append(frontend, u)
			}
		default:
			frontend = append(frontend, u)
		}
	}
	return frontend, engine
}

func encode(json bool, hello *Hello, us []otelstats.Update) []byte {
	var b []byte
	if !json {
		b = AppendHeader(nil)
		if hello != nil {
			b = AppendHello(b, *hello)
		}
		for _, u := range us {
			b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
		}
		return b
	}
	if hello != nil {
		b = fmt.Appendf(b, `{"type":"HELLO","producer":%q,"wall_ts":1700000000,"mono_ts":1,"side":%q}`+"\n", hello.Producer, hello.Side.String())
	}
	for _, u := range us {
		b = AppendUpdateJSON(b, &u)
	}
	return b
}

// TestPresenceKeepsTheRequestOpen: the frontend's whole request, FINISHED
// included, reaches the tracker before a word of the engine's; because the
// engine's producer is connected (its HELLO named its side), the request
// waits for it and nothing of the engine's is lost. Over a connection and
// over HTTP, in both encodings.
func TestPresenceKeepsTheRequestOpen(t *testing.T) {
	for _, js := range []bool{false, true} {
		for _, via := range []string{"unix", "http"} {
			t.Run(fmt.Sprintf("%s/json=%v", via, js), func(t *testing.T) {
				e := newEnv(t, Config{}, otelstats.WithFrontendGrace(time.Hour), otelstats.WithAutoSweep(10*time.Millisecond))
				t0 := time.Now()
				fe, en := sideUpdates("p", t0)
				eh := &Hello{Producer: "engine", WallNs: t0.UnixNano(), MonoNs: 1, Side: otelstats.SideEngine}
				if via == "unix" {
					engine := e.dial()
					defer engine.Close()
					engine.Write(encode(js, eh, nil))
					wait(t, "the engine's HELLO", func() bool { return e.c.Stats().Hellos == 1 })
					front := e.dial()
					front.Write(encode(js, nil, fe))
					front.Close()
					wait(t, "the frontend's updates", func() bool { return e.c.Stats().Recorded == int64(len(fe)) })
					if _, done := e.stat("p"); done {
						t.Fatal("the request ended at the frontend's FINISHED although the engine is connected")
					}
					engine.Write(encode(js, nil, en)[map[bool]int{false: headerLen, true: 0}[js]:])
				} else {
					srv := newHTTP(t, e)
					srv.post(encode(js, eh, nil))
					srv.post(encode(js, nil, fe))
					wait(t, "the frontend's updates", func() bool { return e.c.Stats().Recorded == int64(len(fe)) })
					if _, done := e.stat("p"); done {
						t.Fatal("the request ended at the frontend's FINISHED although the engine posted a minute ago")
					}
					srv.post(encode(js, nil, en))
				}
				checkLifecycle(t, e.waitStat("p"), t0)
				if st := e.c.Stats(); st.Rejected != 0 {
					t.Errorf("%d rejected", st.Rejected)
				}
			})
		}
	}
}

// TestPresenceEndsWithTheConnection: once the engine's producer is gone
// (and has sent no update), a request the frontend finishes ends at once.
func TestPresenceEndsWithTheConnection(t *testing.T) {
	e := newEnv(t, Config{}, otelstats.WithFrontendGrace(time.Hour), otelstats.WithAutoSweep(10*time.Millisecond))
	engine := e.dial()
	t0 := time.Now()
	engine.Write(encode(false, &Hello{WallNs: t0.UnixNano(), Side: otelstats.SideEngine}, nil))
	wait(t, "the engine's HELLO", func() bool { return e.c.Stats().Hellos == 1 })
	engine.Close()
	wait(t, "the engine's stream to end", func() bool { return e.c.Stats().ActiveStreams == 0 })
	fe, _ := sideUpdates("alone", t0)
	front := e.dial()
	front.Write(encode(false, nil, fe))
	front.Close()
	if s := e.waitStat("alone"); s.FinishReason != "stop" {
		t.Errorf("%+v", s)
	}
}

// TestUpdateSide: the side a stream produces is learned from its updates,
// ARRIVED excepted.
func TestUpdateSide(t *testing.T) {
	for _, tc := range []struct {
		u    otelstats.Update
		want otelstats.Side
	}{
		{otelstats.Update{Kind: otelstats.KindArrived}, otelstats.SideAuto},
		{otelstats.Update{Kind: otelstats.KindArrived, Side: otelstats.SideEngine}, otelstats.SideAuto},
		{otelstats.Update{Kind: otelstats.KindInputProcessed}, otelstats.SideFrontend},
		{otelstats.Update{Kind: otelstats.KindQueued}, otelstats.SideEngine},
		{otelstats.Update{Kind: otelstats.KindDecoding}, otelstats.SideEngine},
		{otelstats.Update{Kind: otelstats.KindDetokenized}, otelstats.SideFrontend},
		{otelstats.Update{Kind: otelstats.KindFinished}, otelstats.SideFrontend},
		{otelstats.Update{Kind: otelstats.KindFinished, Side: otelstats.SideEngine}, otelstats.SideEngine},
		{otelstats.Update{Kind: otelstats.KindRemoteKVWait}, otelstats.SideEngine},
		{otelstats.Update{Kind: otelstats.KindEncoded}, otelstats.SideEngine},
	} {
		if got := updateSide(&tc.u); got != tc.want {
			t.Errorf("%v side %v: %v, want %v", tc.u.Kind, tc.u.Side, got, tc.want)
		}
	}
}

type httpEnv struct {
	t   *testing.T
	url string
}

func newHTTP(t *testing.T, e *env) *httpEnv {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.c.Handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return &httpEnv{t: t, url: "http://" + l.Addr().String() + "/v1/updates"}
}

func (h *httpEnv) post(body []byte) {
	h.t.Helper()
	resp, err := http.Post(h.url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		h.t.Fatalf("POST: %d", resp.StatusCode)
	}
}

// TestPresenceOutlivesTheStreamUntilApplied: the frontend's stream is read
// to its end and closed before the tracker applies it (the workers are
// behind), while the engine's whole request waits in the hold for its
// ARRIVED. The frontend must stay present until its updates are applied:
// else its ARRIVED releases the engine's held FINISHED, which ends the
// request at once, and the frontend's own updates are rejected.
func TestPresenceOutlivesTheStreamUntilApplied(t *testing.T) {
	stall := make(chan struct{})
	stalled := make(chan struct{})
	var once bool
	e := newEnv(t, Config{Workers: 1}, otelstats.WithFrontendGrace(time.Hour), otelstats.WithAutoSweep(10*time.Millisecond),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			if s.RequestID == "stall" && !once {
				once = true
				close(stalled)
				<-stall
			}
		}))
	t0 := time.Now()
	fe, en := sideUpdates("p", t0)
	engine := e.dial()
	engine.Write(encode(false, &Hello{WallNs: t0.UnixNano(), Side: otelstats.SideEngine}, en))
	engine.Close()
	wait(t, "the engine's stream applied", func() bool { return e.c.Stats().Recorded == int64(len(en)) })
	// A request whose finish stalls the only worker (its FINISHED the
	// engine's: nothing of the frontend's is accepted before the test's).
	stall1 := []otelstats.Update{
		{RequestID: "stall", Kind: otelstats.KindArrived, Time: t0, Model: "m"},
		{RequestID: "stall", Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: t0.Add(time.Millisecond), FinishReason: "stop"},
	}
	e.c.ServeStream(bytes.NewReader(encode(false, nil, stall1)), "stall")
	<-stalled
	front := e.dial()
	front.Write(encode(false, &Hello{WallNs: t0.UnixNano(), Side: otelstats.SideFrontend}, fe))
	front.Close()
	wait(t, "the frontend's stream read", func() bool { return e.c.Stats().Updates == int64(len(en)+len(stall1)+len(fe)) })
	wait(t, "the frontend's stream ended", func() bool { return e.c.Stats().ActiveStreams == 0 })
	close(stall)
	checkLifecycle(t, e.waitStat("p"), t0)
	if st := e.c.Stats(); st.Rejected != 0 {
		t.Errorf("%d rejected", st.Rejected)
	}
}
