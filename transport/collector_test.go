package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

type env struct {
	t      *testing.T
	tr     *otelstats.Tracker
	rec    *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	c      *Collector
	sock   string

	mu    sync.Mutex
	stats map[string]otelstats.RequestStats
}

// shortDir is a temporary directory short enough for a Unix socket path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func newEnv(t *testing.T, cfg Config, opts ...otelstats.Option) *env {
	t.Helper()
	e := &env{t: t, rec: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), stats: map[string]otelstats.RequestStats{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.rec), sdktrace.WithIDGenerator(spans.IDGenerator()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	all := append([]otelstats.Option{
		otelstats.WithTracerProvider(tp), otelstats.WithMeterProvider(mp),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			e.mu.Lock()
			e.stats[s.RequestID] = *s
			e.mu.Unlock()
		}),
	}, opts...)
	tr, err := otelstats.NewTracker(all...)
	if err != nil {
		t.Fatal(err)
	}
	e.tr = tr
	cfg.Tracker = tr
	if cfg.OnReject == nil {
		cfg.OnReject = func(re *otelstats.RejectError) { t.Logf("rejected: %v", re) }
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = mp
	}
	c, err := NewCollector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	e.sock = filepath.Join(shortDir(t), "c.sock")
	l, err := Listen(Addr{"unix", e.sock}, false)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := c.Serve(l); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-served
		_ = tr.Shutdown(ctx)
	})
	return e
}

func (e *env) dial() net.Conn {
	e.t.Helper()
	c, err := net.Dial("unix", e.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) stat(id string) (otelstats.RequestStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.stats[id]
	return s, ok
}

func (e *env) numStats() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.stats)
}

// wait polls cond for up to 20 s (CI machines can be loaded).
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *env) waitStat(id string) otelstats.RequestStats {
	e.t.Helper()
	var s otelstats.RequestStats
	wait(e.t, "stats of "+id, func() bool {
		var ok bool
		s, ok = e.stat(id)
		return ok
	})
	return s
}

func (e *env) rejected(reason otelstats.Reason) int64 {
	return e.counter("llm.rejected_updates", attribute.String("llm.rejection.reason", string(reason)))
}

func (e *env) counter(name string, match ...attribute.KeyValue) int64 {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				ok := true
				for _, kv := range match {
					if v, has := p.Attributes.Value(kv.Key); !has || v != kv.Value {
						ok = false
					}
				}
				if ok {
					n += p.Value
				}
			}
		}
	}
	return n
}

// lifecycle is a complete two-sided request starting at t0.
func lifecycle(id string, t0 time.Time) []otelstats.Update {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return []otelstats.Update{
		{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"},
		{RequestID: id, Kind: otelstats.KindInputProcessed, Time: ms(1), NumPromptTokens: 10},
		{RequestID: id, Kind: otelstats.KindQueued, Time: ms(2)},
		{RequestID: id, Kind: otelstats.KindPrefilling, Time: ms(5), NumComputedTokens: 10, NumCachedTokens: 4},
		{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(10)},
		{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(11), NumNewTokens: 1},
		{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(20)},
		{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(21), NumNewTokens: 1},
		{RequestID: id, Kind: otelstats.KindFinished, Side: otelstats.SideEngine, Time: ms(22), FinishReason: "stop"},
		{RequestID: id, Kind: otelstats.KindFinished, Time: ms(23), FinishReason: "stop"},
	}
}

func checkLifecycle(t *testing.T, s otelstats.RequestStats, t0 time.Time) {
	t.Helper()
	if !s.ArrivalTime.Equal(t0) {
		t.Errorf("%s: arrival %v, want %v", s.RequestID, s.ArrivalTime, t0)
	}
	if s.FinishReason != "stop" || s.NumOutputTokens != 2 || s.NumPromptTokens.N != 10 || s.NumCachedTokens.N != 4 {
		t.Errorf("%s: %+v", s.RequestID, s)
	}
	want := map[string]struct {
		got  otelstats.Latency
		want time.Duration
	}{
		"e2e":   {s.E2ELatency, 23 * time.Millisecond},
		"queue": {s.QueueDuration, 3 * time.Millisecond},
		"ttft":  {s.FirstTokenLatency, 11 * time.Millisecond},
	}
	for k, v := range want {
		if !v.got.Valid || v.got.Value != v.want {
			t.Errorf("%s: %s = %v, want %v", s.RequestID, k, v.got, v.want)
		}
	}
}

func TestJSONLinesWithHelloAndMonotonicTimes(t *testing.T) {
	e := newEnv(t, Config{})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var b bytes.Buffer
	// Anchor: mono 100 s is wall 1700000000 s.
	b.WriteString(`{"type":"HELLO","producer":"py-engine","wall_ts":1700000000.000000000,"mono_ts":100}` + "\n")
	for _, u := range lifecycle("j1", t0) {
		line := AppendUpdateJSON(nil, &u)
		if u.Kind == otelstats.KindQueued || u.Kind == otelstats.KindPrefilling || u.Kind == otelstats.KindDecoding {
			// The engine side uses its monotonic clock.
			mono := 100 + float64(u.Time.Sub(t0))/1e9
			line = bytes.Replace(line, []byte(`"ts":`), []byte(`"mono_ts":`+fmt.Sprintf("%.9f", mono)+`,"x":`), 1)
		}
		b.Write(line)
	}
	conn := e.dial()
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	s := e.waitStat("j1")
	checkLifecycle(t, s, t0)
	// The request can finish before the stream counts its last update:
	// the counters are final once the stream has ended.
	wait(t, "the stream to end", func() bool { return e.c.Stats().ActiveStreams == 0 })
	if st := e.c.Stats(); st.Hellos != 1 || st.Updates != 10 || st.Rejected != 0 || st.Malformed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestBinaryProducerEndToEnd(t *testing.T) {
	e := newEnv(t, Config{})
	for _, js := range []bool{false, true} {
		p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, Name: "go-engine", JSON: js})
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("b-%v", js)
		// time.Now carries a monotonic reading: these travel as mono_ns.
		t0 := time.Now()
		for _, u := range lifecycle(id, t0) {
			if !p.Send(u) {
				t.Fatal("Send dropped")
			}
		}
		s := e.waitStat(id)
		// The anchor maps mono back to the wall clock exactly (to the ns
		// rounding of the JSON ts).
		if d := s.ArrivalTime.Sub(t0.Round(0)); d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("json=%v: arrival off by %v", js, d)
		}
		checkLifecycleTimes(t, s)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if st := p.Stats(); st.Sent != 10 || st.Dropped != 0 || st.Lost != 0 || st.Connects != 1 {
			t.Errorf("json=%v: producer stats %+v", js, st)
		}
	}
}

// checkLifecycleTimes checks the intervals of lifecycle (to a µs, for the
// JSON encoding's float ts).
func checkLifecycleTimes(t *testing.T, s otelstats.RequestStats) {
	t.Helper()
	near := func(what string, l otelstats.Latency, want time.Duration) {
		if !l.Valid || l.Value-want > time.Microsecond || want-l.Value > time.Microsecond {
			t.Errorf("%s: %s = %v, want %v", s.RequestID, what, l, want)
		}
	}
	near("e2e", s.E2ELatency, 23*time.Millisecond)
	near("queue", s.QueueDuration, 3*time.Millisecond)
	near("ttft", s.FirstTokenLatency, 11*time.Millisecond)
	if s.NumOutputTokens != 2 || s.ClampedSpans != 0 {
		t.Errorf("%s: %+v", s.RequestID, s)
	}
}

func TestAlignClocksRemovesProducerSkew(t *testing.T) {
	for _, align := range []bool{false, true} {
		t.Run(fmt.Sprint("align=", align), func(t *testing.T) {
			e := newEnv(t, Config{AlignClocks: align})
			// This producer's wall clock is an hour fast.
			p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, ClockOffset: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			t0 := time.Now()
			for _, u := range lifecycle("s", t0) {
				p.Send(u)
			}
			s := e.waitStat("s")
			off := s.ArrivalTime.Sub(t0)
			if align && (off < 0 || off > 50*time.Millisecond) {
				t.Errorf("aligned arrival off by %v", off)
			}
			if !align && (off < time.Hour-time.Millisecond || off > time.Hour+time.Millisecond) {
				t.Errorf("producer-anchored arrival off by %v, want the producer's hour", off)
			}
			checkLifecycleTimes(t, s)
		})
	}
}

func TestMonotonicBeforeHelloIsRejected(t *testing.T) {
	e := newEnv(t, Config{})
	conn := e.dial()
	var b []byte
	b = AppendHeader(b)
	b = AppendUpdate(b, &otelstats.Update{RequestID: "x", Kind: otelstats.KindQueued}, Stamp{Ns: 5, Mono: true})
	conn.Write(b)
	conn.Write([]byte{})
	conn.Close()
	wait(t, "no_anchor", func() bool { return e.c.Stats().NoAnchor == 1 })
	wait(t, "bad_timestamp counted", func() bool { return e.rejected(otelstats.ReasonBadTimestamp) == 1 })

	conn = e.dial()
	conn.Write([]byte(`{"request_id":"y","type":"QUEUED","mono_ts":5}` + "\n"))
	conn.Close()
	wait(t, "no_anchor json", func() bool { return e.c.Stats().NoAnchor == 2 })
}

// goodStream writes a complete request for id over its own connection.
func goodStream(t *testing.T, e *env, id string) {
	t.Helper()
	conn := e.dial()
	defer conn.Close()
	b := AppendHeader(nil)
	b = AppendHello(b, Hello{Producer: "good", WallNs: 1, MonoNs: 0})
	t0 := time.Unix(1_700_000_000, 0)
	for _, u := range lifecycle(id, t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
}

func TestRobustness(t *testing.T) {
	upd := AppendUpdate(nil, &otelstats.Update{RequestID: "lost", Kind: otelstats.KindArrived, Model: "m"}, Stamp{Ns: 1_700_000_000e9})
	badLine := `{"request_id":"bad","type":"ARRIVED","ts":1700000000,"model":"m"` // no }
	// A line of exactly MaxLine bytes before its newline is within the limit.
	lineOf := func(n int) string {
		head := `{"request_id":"ok","type":"ARRIVED","ts":1700000000,"model":"m","pad":"`
		return head + strings.Repeat("x", n-len(head)-2) + `"}`
	}
	cases := []struct {
		name  string
		bytes []byte
		check func(st Stats) bool
	}{
		{"json line of MaxLine bytes", []byte(lineOf(DefaultMaxLine) + "\n"), func(st Stats) bool { return st.Updates == 31 && st.Oversized == 0 }},
		{"json line of MaxLine+1 bytes", []byte(lineOf(DefaultMaxLine+1) + "\n"), func(st Stats) bool { return st.Updates == 30 && st.Oversized == 1 }},
		// CRLF (a Windows producer's text-mode socket) is the line's end,
		// not a byte of it: such a line was oversized.
		{"json line of MaxLine bytes and CRLF", []byte(lineOf(DefaultMaxLine) + "\r\n"), func(st Stats) bool { return st.Updates == 31 && st.Oversized == 0 }},
		{"json line of MaxLine+1 bytes and CRLF", []byte(lineOf(DefaultMaxLine+1) + "\r\n"), func(st Stats) bool { return st.Updates == 30 && st.Oversized == 1 }},
		{"truncated frame", append(AppendHeader(nil), upd[:len(upd)-3]...), func(st Stats) bool { return st.Truncated == 1 }},
		{"truncated length", append(AppendHeader(nil), 0, 0), func(st Stats) bool { return st.Truncated == 1 }},
		{"truncated header", []byte("LLM"), func(st Stats) bool { return st.Truncated == 1 }},
		{"bad version", []byte("LLMT\x09"), func(st Stats) bool { return st.Garbage == 1 }},
		{"garbage", []byte("\x00\x01\x02garbage\xff"), func(st Stats) bool { return st.Garbage == 1 }},
		{"oversized frame", append(AppendHeader(nil), 0x7F, 0, 0, 0, 2, 1, 2, 3), func(st Stats) bool { return st.Oversized == 1 }},
		{"zero-length frame", append(AppendHeader(nil), 0, 0, 0, 0), func(st Stats) bool { return st.Oversized == 1 }},
		{"malformed then good frame", append(append(AppendHeader(nil), frame(FrameUpdate, 99, 0, 1, 1, 'r')...), upd...),
			func(st Stats) bool { return st.Malformed == 1 && st.Updates == 31 }},
		{"partial json line", []byte(badLine), func(st Stats) bool { return st.Truncated == 1 }},
		{"oversized json line", []byte(`{"a":"` + strings.Repeat("x", DefaultMaxLine) + "\"}\n" + `{"request_id":"ok","type":"ARRIVED","ts":1700000000,"model":"m"}` + "\n"),
			func(st Stats) bool { return st.Oversized == 1 && st.Updates == 31 }},
		{"malformed json lines", []byte("{nope\n{\"request_id\":\"r\",\"type\":\"BOGUS\",\"ts\":1}\n"),
			func(st Stats) bool { return st.Malformed == 1 && st.Rejected == 1 }},
		{"complete last line without newline", []byte(`{"request_id":"ok","type":"ARRIVED","ts":1700000000,"model":"m"}`),
			func(st Stats) bool { return st.Updates == 31 && st.Truncated == 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Config{})
			// Good producers before, during and after the bad one.
			goodStream(t, e, "before")
			conn := e.dial()
			goodStream(t, e, "during")
			if _, err := conn.Write(c.bytes); err != nil {
				t.Fatal(err)
			}
			// The producer vanishes mid-stream.
			conn.Close()
			goodStream(t, e, "after")
			wait(t, "the bad stream's counters", func() bool { return c.check(e.c.Stats()) })
			for _, id := range []string{"before", "during", "after"} {
				checkLifecycle(t, e.waitStat(id), time.Unix(1_700_000_000, 0).UTC())
			}
		})
	}
}

func TestMalformedCountsInTracker(t *testing.T) {
	e := newEnv(t, Config{})
	conn := e.dial()
	b := AppendHeader(nil)
	b = append(b, frame(FrameUpdate, 99, 0, 1, 1, 'r')...)
	b = append(b, frame(FrameUpdate, 2, 0, 1, 1, 'r')...) // INPUT_PROCESSED without prompt tokens
	conn.Write(b)
	conn.Close()
	wait(t, "malformed in llm.rejected_updates", func() bool { return e.rejected(otelstats.ReasonMalformed) == 1 })
	wait(t, "missing_payload in llm.rejected_updates", func() bool { return e.rejected(otelstats.ReasonMissingPayload) == 1 })
	if n := e.counter(MetricCollectorErrors, ErrorKey.String("malformed")); n != 1 {
		t.Errorf("%s{malformed} = %d", MetricCollectorErrors, n)
	}
}

func TestManyProducersAtOnce(t *testing.T) {
	e := newEnv(t, Config{Workers: 4})
	const producers, perProducer = 32, 40
	var wg sync.WaitGroup
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, Name: fmt.Sprint("p", i), JSON: i%3 == 0})
			if err != nil {
				t.Error(err)
				return
			}
			for j := range perProducer {
				// Real times: the tracker's sweeps follow the latest time
				// seen, so far-future times of one producer would expire
				// another's waits.
				for _, u := range lifecycle(fmt.Sprintf("p%d-r%d", i, j), time.Now()) {
					if !p.Send(u) {
						t.Error("dropped")
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	wait(t, "every request", func() bool { return e.numStats() == producers*perProducer })
	if st := e.c.Stats(); st.Dropped != 0 || st.Rejected != 0 || st.Updates != producers*perProducer*10 {
		t.Errorf("stats %+v", st)
	}
	for i := range producers {
		checkLifecycleTimes(t, e.waitStat(fmt.Sprintf("p%d-r%d", i, perProducer-1)))
	}
}

func TestProducerReconnects(t *testing.T) {
	e := newEnv(t, Config{})
	p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	for _, u := range lifecycle("first", time.Now()) {
		p.Send(u)
	}
	e.waitStat("first")

	// The collector restarts on the same socket.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2, err := NewCollector(Config{Tracker: e.tr})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	l, err := Listen(Addr{"unix", e.sock}, false)
	if err != nil {
		t.Fatal(err)
	}
	go c2.Serve(l)

	// The first write after the restart may vanish into the dead
	// connection; keep sending fresh requests until one gets through.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("second-", i)
		for _, u := range lifecycle(id, time.Now()) {
			p.Send(u)
		}
		got := false
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if _, ok := e.stat(id); ok {
				got = true
				break
			}
		}
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request got through after the restart; producer %+v", p.Stats())
		}
	}
	if st := p.Stats(); st.Connects < 2 {
		t.Errorf("producer stats %+v: want a reconnect", st)
	}
}

func TestProducerNeverBlocks(t *testing.T) {
	dir := shortDir(t)
	p, err := NewProducer(ProducerConfig{Addr: "unix:" + filepath.Join(dir, "nobody.sock"), Buffer: 100, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	u := otelstats.Update{RequestID: "r", Kind: otelstats.KindQueued, Time: time.Now()}
	sent := 0
	for range 100_000 {
		if p.Send(u) {
			sent++
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("100k Sends took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = p.Close(ctx)
	st := p.Stats()
	if sent > 101 || st.Queued != int64(sent) || st.Sent != 0 {
		t.Errorf("sent %d, stats %+v", sent, st)
	}
	if st.Dropped != 100_000 {
		t.Errorf("dropped %d, want every update (%+v)", st.Dropped, st)
	}
	if p.Send(u) {
		t.Error("Send after Close succeeded")
	}
}

func TestQueueFullDrops(t *testing.T) {
	block := make(chan struct{})
	var once sync.Once
	e := newEnv(t, Config{QueueSize: 4, Workers: 1}, otelstats.WithOnFinish(func(*otelstats.RequestStats) {
		once.Do(func() { <-block })
	}))
	var b bytes.Buffer
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 50 {
		u := otelstats.Update{RequestID: fmt.Sprint("q", i), Kind: otelstats.KindArrived, Time: t0, Model: "m"}
		b.Write(AppendUpdateJSON(nil, &u))
		u.Kind, u.FinishReason = otelstats.KindFinished, "stop"
		b.Write(AppendUpdateJSON(nil, &u))
	}
	st := e.c.ServeStream(&b, "test")
	close(block)
	if st.Dropped == 0 || st.Updates+st.Dropped != 100 {
		t.Errorf("stream stats %+v", st)
	}
	if n := e.counter(MetricCollectorUpdates, OutcomeKey.String("dropped")); n != st.Dropped {
		t.Errorf("dropped metric %d, stats %d", n, st.Dropped)
	}
}

func TestHTTPUpdates(t *testing.T) {
	e := newEnv(t, Config{MaxBody: 4096})
	srv := httptest.NewServer(e.c.Handler())
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	var b bytes.Buffer
	t0 := time.Unix(1_700_000_000, 0).UTC()
	for _, u := range lifecycle("h1", t0) {
		b.Write(AppendUpdateJSON(nil, &u))
	}
	b.WriteString("not json\n")
	resp, err := http.Post(srv.URL+"/v1/updates", "application/x-ndjson", &b)
	if err != nil {
		t.Fatal(err)
	}
	var st StreamStats
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || st.Updates != 10 || st.Malformed != 1 || st.Encoding != "json" {
		t.Fatalf("%d %+v", resp.StatusCode, st)
	}
	checkLifecycle(t, e.waitStat("h1"), t0)

	// Binary bodies work too.
	bin := AppendHeader(nil)
	for _, u := range lifecycle("h2", t0) {
		bin = AppendUpdate(bin, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	resp, err = http.Post(srv.URL+"/v1/updates", "application/octet-stream", bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	checkLifecycle(t, e.waitStat("h2"), t0)

	resp, err = http.Get(srv.URL + "/v1/updates")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	big := bytes.Repeat([]byte(`{"request_id":"big","type":"QUEUED","ts":1700000000}`+"\n"), 200)
	resp, err = http.Post(srv.URL+"/v1/updates", "application/x-ndjson", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/v1/updates", "text/plain", strings.NewReader("\x00garbage"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("garbage body: %d", resp.StatusCode)
	}
}

func TestListenRefusesRemoteTCP(t *testing.T) {
	if _, err := Listen(Addr{"tcp", "0.0.0.0:0"}, false); err == nil {
		t.Fatal("listening on 0.0.0.0 without allowRemote")
	}
	l, err := Listen(Addr{"tcp", "127.0.0.1:0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	// A live listener is not replaced.
	if _, err := Listen(Addr{"unix", path}, false); err == nil {
		t.Fatal("replaced a live socket")
	}
	l.Close() // leaves the file behind, like a crashed collector
	l2, err := Listen(Addr{"unix", path}, false)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	l2.Close()
}

func TestParseAddr(t *testing.T) {
	for in, want := range map[string]Addr{
		"unix:/tmp/a.sock": {"unix", "/tmp/a.sock"}, "tcp:127.0.0.1:4000": {"tcp", "127.0.0.1:4000"}, "/tmp/b.sock": {"unix", "/tmp/b.sock"},
	} {
		got, err := ParseAddr(in)
		if err != nil || got != want {
			t.Errorf("ParseAddr(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "unix:", "tcp:nope", "udp:1.2.3.4:5", "x", "tcp:[::1]:99999", "tcp:127.0.0.1:-1", "tcp:127.0.0.1:nosuchservice"} {
		if _, err := ParseAddr(in); err == nil {
			t.Errorf("ParseAddr(%q) ok", in)
		}
	}
}

// TestTCPStream exercises a loopback TCP producer with random interleaving
// of many requests in one stream.
func TestTCPStream(t *testing.T) {
	e := newEnv(t, Config{})
	l, err := Listen(Addr{"tcp", "127.0.0.1:0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	go e.c.Serve(l)
	p, err := NewProducer(ProducerConfig{Addr: "tcp:" + l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var all [][]otelstats.Update
	for i := range 20 {
		all = append(all, lifecycle(fmt.Sprint("t", i), t0.Add(time.Duration(i)*time.Millisecond)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for len(all) > 0 {
		i := rng.IntN(len(all))
		p.Send(all[i][0])
		if all[i] = all[i][1:]; len(all[i]) == 0 {
			all = append(all[:i], all[i+1:]...)
		}
	}
	wait(t, "20 requests", func() bool { return e.numStats() == 20 })
	p.Close(context.Background())
	for i := range 20 {
		checkLifecycleTimes(t, e.waitStat(fmt.Sprint("t", i)))
	}
}

// TestCloseDrainsWrittenData: what a producer wrote before the collector
// closed is still recorded.
func TestCloseDrainsWrittenData(t *testing.T) {
	e := newEnv(t, Config{})
	conn := e.dial()
	defer conn.Close()
	wait(t, "the stream to be served", func() bool { return e.c.Stats().ActiveStreams == 1 })
	b := AppendHeader(nil)
	t0 := time.Unix(1_700_000_000, 0).UTC()
	for _, u := range lifecycle("drained", t0) {
		b = AppendUpdate(b, &u, Stamp{Ns: u.Time.UnixNano()})
	}
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	// The producer stays connected; Close must not wait for it forever.
	start := time.Now()
	if err := e.c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	checkLifecycle(t, e.waitStat("drained"), t0)
	if st := e.c.Stats(); st.Truncated != 0 || st.Updates != 10 {
		t.Errorf("stats %+v", st)
	}
}

// TestProducerDropsWhatNoCollectorTakes: an update larger than a
// collector's frame or line limit (a 70 KiB request id: an identity is
// never cut, as a long stop string is) is dropped at the producer and
// counted; the connection and the updates after it go on. Sent, it ended
// the stream at the collector and took an update written after it along,
// counted as sent.
func TestProducerDropsWhatNoCollectorTakes(t *testing.T) {
	for _, json := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", json), func(t *testing.T) {
			e := newEnv(t, Config{})
			p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, JSON: json})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, "connect", func() bool { return p.Stats().Connects == 1 })
			now := time.Now()
			p.Send(otelstats.Update{Kind: otelstats.KindArrived, RequestID: strings.Repeat("x", 70<<10), Model: "m", Time: now})
			for i := range 20 {
				p.Send(otelstats.Update{Kind: otelstats.KindArrived, RequestID: fmt.Sprint("after", i), Model: "m", Time: now})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			wait(t, "the 20 small updates", func() bool { return e.c.Stats().Updates == 20 })
			st, cs := p.Stats(), e.c.Stats()
			if st.Sent != 20 || st.Dropped != 1 || st.Lost != 0 || st.Connects != 1 || cs.Oversized != 0 {
				t.Errorf("producer %+v, collector %+v; want 20 sent, 1 dropped, one connection, nothing oversized", st, cs)
			}
		})
	}
}
