package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestHelloSideIsTheDefaultSide: a producer whose HELLO says side=engine
// and whose FINISHED carries no side of its own (a non-Go producer that
// relies on its HELLO) ends the engine's side, not the frontend's: the
// frontend's later updates are all applied. A stream without a HELLO
// naming a side keeps the wire default (FINISHED: the frontend's), also
// over HTTP, where each body has its own HELLO and one body's side does
// not leak into the next. Over a connection and over HTTP, in both
// encodings.
func TestHelloSideIsTheDefaultSide(t *testing.T) {
	for _, js := range []bool{false, true} {
		for _, via := range []string{"unix", "http"} {
			t.Run(fmt.Sprintf("%s/json=%v", via, js), func(t *testing.T) {
				e := newEnv(t, Config{}, otelstats.WithFrontendGrace(time.Hour), otelstats.WithAutoSweep(10*time.Millisecond))
				t0 := time.Now()
				fe, en := sideUpdates("hs", t0)
				for i := range en {
					if en[i].Kind == otelstats.KindFinished {
						en[i].Side = otelstats.SideAuto // the HELLO says whose it is
					}
				}
				feHead, feTail := fe[:2], fe[2:] // ARRIVED, INPUT_PROCESSED; then the rest
				eh := &Hello{Producer: "engine", WallNs: t0.UnixNano(), MonoNs: 1, Side: otelstats.SideEngine}
				var srv *httpEnv
				if via == "http" {
					srv = newHTTP(t, e)
				}
				send := func(hello *Hello, us []otelstats.Update) {
					if srv != nil {
						srv.post(encode(js, hello, us))
						return
					}
					c := e.dial()
					c.Write(encode(js, hello, us))
					c.Close()
				}
				send(nil, feHead)
				wait(t, "the frontend's first updates", func() bool { return e.c.Stats().Recorded == int64(len(feHead)) })
				send(eh, en)
				wait(t, "the engine's updates", func() bool { return e.c.Stats().Recorded == int64(len(feHead)+len(en)) })
				if _, done := e.stat("hs"); done {
					t.Fatal("the engine's FINISHED ended the request: taken as the frontend's")
				}
				send(nil, feTail)
				checkLifecycle(t, e.waitStat("hs"), t0)
				if st := e.c.Stats(); st.Rejected != 0 {
					t.Errorf("%d rejected (after_finished: %d)", st.Rejected, e.rejected(otelstats.ReasonAfterFinished))
				}
			})
		}
	}
}
