package cli

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// sides splits lifecycle(id, t0) into the frontend's and the engine's
// updates.
func sides(id string, t0 time.Time) (frontend, engine []otelstats.Update) {
	for _, u := range lifecycle(id, t0) {
		switch {
		case u.Kind == otelstats.KindQueued || u.Kind == otelstats.KindPrefilling || u.Kind == otelstats.KindDecoding,
			u.Kind == otelstats.KindFinished && u.Side == otelstats.SideEngine:
			engine = append(engine, u)
		default:
			frontend = append(frontend, u)
		}
	}
	return frontend, engine
}

// streamBytes encodes a producer's stream: header (binary), a HELLO naming
// side when hello is set, then us.
func streamBytes(binary, hello bool, side otelstats.Side, us []otelstats.Update) []byte {
	var b []byte
	if binary {
		b = transport.AppendHeader(nil)
		if hello {
			b = transport.AppendHello(b, transport.Hello{Producer: side.String(), WallNs: time.Now().UnixNano(), MonoNs: 1, Side: side})
		}
		for _, u := range us {
			b = transport.AppendUpdate(b, &u, transport.Stamp{Ns: u.Time.UnixNano()})
		}
		return b
	}
	if hello {
		b = fmt.Appendf(b, `{"type":"HELLO","producer":%q,"wall_ts":%d,"mono_ts":1,"side":%q}`+"\n", side.String(), time.Now().Unix(), side.String())
	}
	for _, u := range us {
		b = transport.AppendUpdateJSON(b, &u)
	}
	return b
}

// producerStream is one side's stream to collect, by connection or by
// HTTP bodies.
type producerStream struct {
	t      *testing.T
	c      *collector
	side   otelstats.Side
	binary bool
	conn   net.Conn // nil over HTTP
	url    string
}

func openStream(t *testing.T, c *collector, via string, binary bool, side otelstats.Side, sock string) *producerStream {
	t.Helper()
	p := &producerStream{t: t, c: c, side: side, binary: binary}
	hello := streamBytes(binary, true, side, nil)
	switch via {
	case "http":
		p.url = "http://" + c.httpAddr() + "/v1/updates"
		p.post(hello) // a HELLO alone: the side is present from now
		return p
	case "unix":
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		p.conn = conn
	case "tcp":
		conn, err := net.Dial("tcp", c.listenAddr("tcp"))
		if err != nil {
			t.Fatal(err)
		}
		p.conn = conn
	}
	t.Cleanup(func() { p.conn.Close() })
	if _, err := p.conn.Write(hello); err != nil {
		t.Fatal(err)
	}
	c.waitStderr(`msg="producer connected" producer=` + side.String() + ` `)
	return p
}

func (p *producerStream) post(body []byte) {
	p.t.Helper()
	resp, err := http.Post(p.url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		p.t.Fatalf("POST: %d", resp.StatusCode)
	}
}

// send delivers us and, over a connection, closes it and waits until
// collect has read it to its end (over HTTP the answer says so).
func (p *producerStream) send(us []otelstats.Update) {
	p.t.Helper()
	b := streamBytes(p.binary, false, p.side, us)
	if p.url != "" {
		if p.binary {
			// A body is a stream of its own: it needs the header again.
			b = append(transport.AppendHeader(nil), b[len(transport.AppendHeader(nil)):]...)
		}
		p.post(b)
		return
	}
	if p.binary {
		b = b[len(transport.AppendHeader(nil)):] // the header went with the HELLO
	}
	if _, err := p.conn.Write(b); err != nil {
		p.t.Fatal(err)
	}
	ended := strings.Count(p.c.stderr.String(), `msg="stream ended`)
	p.conn.Close()
	p.c.waitFor("the stream's end", func() bool { return strings.Count(p.c.stderr.String(), `msg="stream ended`) > ended })
}

// TestTwoStreams: a frontend and an engine stream their sides of the same
// requests to collect separately, and the tracker gets them in either
// order, or the engine's 1.5 s after the frontend's whole requests — over
// a Unix socket, TCP and POST /v1/updates, in both encodings. Each
// producer names its side in its HELLO, so it is present from the start:
// nothing of any request is lost (SPEC §1), and the numbers are the
// time-ordered ones. (This is TestTwoProcesses' failure on a busy machine,
// made deterministic: without presence the frontend's FINISHED ends the
// request and every engine update after it is rejected after_finished.)
func TestTwoStreams(t *testing.T) {
	const n = 4
	for _, via := range []string{"unix", "tcp", "http"} {
		for _, binary := range []bool{true, false} {
			for _, order := range []string{"frontend first", "engine first", "engine 1.5s late"} {
				enc := map[bool]string{true: "binary", false: "json"}[binary]
				t.Run(via+"/"+enc+"/"+order, func(t *testing.T) {
					dir := shortDir(t)
					sock := filepath.Join(dir, "c.sock")
					spans := filepath.Join(dir, "spans.jsonl")
					c := startCollect(t, noExport(), "-listen", "unix:"+sock, "-listen", "tcp:127.0.0.1:0", "-http", "127.0.0.1:0",
						"-spans-out", spans, "-v")
					t0 := time.Now().Add(-100 * time.Millisecond)
					var fe, en []otelstats.Update
					var ids []string
					for i := range n {
						id := fmt.Sprintf("r%d", i)
						f, e := sides(id, t0.Add(time.Duration(i)*time.Millisecond))
						fe, en = append(fe, f...), append(en, e...)
						ids = append(ids, id)
					}
					front := openStream(t, c, via, binary, otelstats.SideFrontend, sock)
					engine := openStream(t, c, via, binary, otelstats.SideEngine, sock)
					switch order {
					case "frontend first":
						front.send(fe)
						engine.send(en)
					case "engine first":
						engine.send(en)
						front.send(fe)
					case "engine 1.5s late":
						front.send(fe)
						time.Sleep(1500 * time.Millisecond) // the scenario: the engine's stream lags, within the 2 s grace
						engine.send(en)
					}
					s := c.waitStats(ids...)
					for _, id := range ids {
						checkComplete(t, id, s[id])
						if s[id]["finish_reason"] != "stop" || s[id]["num_cached_tokens"] != float64(4) {
							t.Errorf("%s: %v", id, s[id])
						}
					}
					if cnt := c.stopped(); cnt["rejected"] != 0 || cnt["recorded"] != int64(n*10) {
						t.Errorf("final counters %v: something was rejected or lost", cnt)
					}
					b, _ := os.ReadFile(spans)
					for _, name := range []string{"llm.queue", "llm.prefill", "llm.decode", "llm.detokenize", "llm.input_processing"} {
						if got := bytes.Count(b, []byte(`"name":"`+name+`"`)); got != n {
							t.Errorf("%d %s spans, want %d", got, name, n)
						}
					}
				})
			}
		}
	}
}

// TestTwoStreamsPastTheGrace: an engine stream later than the grace
// period loses its updates — counted, never silently — and the request
// ends with what the frontend reported. The grace is the bound of the
// guarantee above, not a hope.
func TestTwoStreamsPastTheGrace(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "c.sock")
	c := startCollect(t, noExport(), "-listen", "unix:"+sock, "-grace", "300ms", "-v")
	fe, en := sides("late", time.Now().Add(-100*time.Millisecond))
	front := openStream(t, c, "unix", true, otelstats.SideFrontend, sock)
	engine := openStream(t, c, "unix", true, otelstats.SideEngine, sock)
	front.send(fe)
	s := c.waitStats("late")["late"]
	if s["queue_duration_s"] != nil {
		t.Errorf("the request has engine numbers before the engine sent any: %v", s)
	}
	engine.send(en)
	c.waitStderr("after finished")
	if cnt := c.stopped(); cnt["rejected"] != int64(len(en)) {
		t.Errorf("final counters %v: want the engine's %d late updates rejected", cnt, len(en))
	}
}
