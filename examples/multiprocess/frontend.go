package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/llmtrace/llmtrace/internal/spanlog"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelconf"
	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// feReq is one request as the frontend sees it.
type feReq struct {
	id       string
	tokens   int
	abortAt  int // the client disconnects after this many tokens (0: never)
	finished bool
}

type frontend struct {
	o    *options
	log  *slog.Logger
	sink func(otelstats.Update)

	mu      sync.Mutex
	enc     *json.Encoder
	reqs    map[string]*feReq
	pending int
	allDone chan struct{}
	// waitEngine, with the collector in this process, waits for the
	// engine's stream.
	waitEngine func()
}

func runFrontend(o *options) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", "frontend", "pid", os.Getpid())
	if o.engineAddr == "" || o.collectorAddr == "" {
		dir, err := os.MkdirTemp("", "llmtrace-mp")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if o.engineAddr == "" {
			o.engineAddr = "unix:" + filepath.Join(dir, "engine.sock")
		}
		if o.collectorAddr == "" {
			o.collectorAddr = "unix:" + filepath.Join(dir, "collector.sock")
		}
	}
	f := &frontend{o: o, log: log, reqs: map[string]*feReq{}, allDone: make(chan struct{})}

	// Where this process's updates go: its own tracker, with the engine's
	// stream served on -collector; or a producer to an external collector.
	var finishCollector func() error
	if o.hostCollector {
		sink, fin, err := f.hostCollector()
		if err != nil {
			return err
		}
		f.sink, finishCollector = sink, fin
	} else {
		p, err := transport.NewProducer(transport.ProducerConfig{Addr: o.collectorAddr, Name: fmt.Sprintf("frontend-%d", os.Getpid()),
			Side: otelstats.SideFrontend, Logger: log})
		if err != nil {
			return err
		}
		f.sink = func(u otelstats.Update) { p.Send(u) }
		finishCollector = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := p.Close(ctx)
			st := p.Stats()
			log.Info("producer closed", "sent", st.Sent, "dropped", st.Dropped, "lost", st.Lost)
			return err
		}
	}

	var child *exec.Cmd
	if o.spawnEngine {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		child = exec.Command(exe, "-role", "engine", "-engine", o.engineAddr, "-collector", o.collectorAddr,
			"-clock-offset", o.clockOffset.String(), "-step", o.step.String(), "-batch", fmt.Sprint(o.batch),
			"-kv-tokens", fmt.Sprint(o.kvTokens), "-chunk", fmt.Sprint(o.chunk))
		child.Stdout, child.Stderr = os.Stderr, os.Stderr
		if err := child.Start(); err != nil {
			return err
		}
		log.Info("engine started", "pid", child.Process.Pid)
	}

	conn, err := dialRetry(o.engineAddr, 10*time.Second)
	if err != nil {
		if child != nil {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
		return err
	}
	if f.waitEngine != nil {
		f.waitEngine()
	}
	f.enc = json.NewEncoder(conn)
	go f.readEngine(conn)
	f.generate()

	select {
	case <-f.allDone:
	case <-time.After(2 * time.Minute):
		log.Error("requests did not finish in time", "pending", f.pending)
	}
	// The engine aborts whatever is left and exits when we hang up.
	conn.Close()
	if child != nil {
		if err := child.Wait(); err != nil {
			log.Error("engine exited", "err", err)
		}
	}
	return finishCollector()
}

// hostCollector runs the tracker and the engine stream's collector in this
// process. The returned function waits for the engine's last updates, then
// shuts everything down and prints the summary.
func (f *frontend) hostCollector() (func(otelstats.Update), func() error, error) {
	o := f.o
	ctx := context.Background()
	cfg := otelconf.Config{ServiceName: "llmtrace-multiprocess"}
	if o.spansOut != "" {
		w, err := os.Create(o.spansOut)
		if err != nil {
			return nil, nil, err
		}
		cfg.SpanProcessors = []sdktrace.SpanProcessor{spanlog.New(w, true)}
	}
	prov, err := otelconf.Setup(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	var out io.Writer = os.Stdout
	var outFile *os.File
	if o.statsOut != "-" && o.statsOut != "" {
		if outFile, err = os.Create(o.statsOut); err != nil {
			return nil, nil, err
		}
		out = outFile
	}
	bw := bufio.NewWriter(out)
	var mu sync.Mutex
	var sum summary.Collector
	var buf []byte
	tr, err := otelstats.NewTracker(append(prov.TrackerOptions(),
		otelstats.WithAutoSweep(100*time.Millisecond),
		otelstats.WithTokenLatencies(true),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			mu.Lock()
			defer mu.Unlock()
			sum.Add(s)
			buf = s.AppendJSON(buf[:0])
			_, _ = bw.Write(append(buf, '\n'))
		}),
		otelstats.WithOnReject(func(e *otelstats.RejectError) { f.log.Warn("rejected", "err", e) }),
	)...)
	if err != nil {
		return nil, nil, err
	}
	col, err := transport.NewCollector(transport.Config{Tracker: tr, AlignClocks: o.alignClocks, Logger: f.log, MeterProvider: prov.MeterProvider,
		OnReject: func(e *otelstats.RejectError) { f.log.Warn("rejected", "err", e) }})
	if err != nil {
		return nil, nil, err
	}
	a, err := transport.ParseAddr(o.collectorAddr)
	if err != nil {
		return nil, nil, err
	}
	l, err := transport.Listen(a, false)
	if err != nil {
		return nil, nil, err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = col.Serve(l)
	}()
	// Requests go out once the collector has the engine's HELLO: the
	// engine is then present (SPEC §1), and what the frontend finishes
	// waits for its updates.
	f.waitEngine = func() {
		deadline := time.Now().Add(10 * time.Second)
		for col.Stats().Hellos == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	sink := func(u otelstats.Update) {
		if err := tr.Record(u); err != nil {
			f.log.Warn("rejected", "err", err)
		}
	}
	finish := func() error {
		// The engine's last updates may still be on their way: wait until
		// every request has ended or the engine has hung up (it flushes
		// its producer first), however slow the machine; a minute bounds a
		// dead engine.
		deadline := time.Now().Add(time.Minute)
		for tr.InFlight() > 0 && time.Now().Before(deadline) {
			if st := col.Stats(); st.Streams > 0 && st.ActiveStreams == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = col.Close(sctx)
		<-served
		_ = tr.Shutdown(sctx)
		err := prov.Shutdown(sctx)
		mu.Lock()
		defer mu.Unlock()
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		if outFile != nil {
			if cerr := outFile.Close(); err == nil {
				err = cerr
			}
		}
		sum.WriteTable(os.Stderr)
		st := col.Stats()
		f.log.Info("collector", "streams", st.Streams, "updates", st.Updates, "dropped", st.Dropped, "rejected", st.Rejected)
		return err
	}
	return sink, finish, nil
}

func dialRetry(addr string, within time.Duration) (net.Conn, error) {
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(within)
	for {
		c, err := net.Dial(a.Network, a.Address)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("engine at %s: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// generate sends o.n requests with exponential gaps between arrivals.
func (f *frontend) generate() {
	o := f.o
	rng := rand.New(rand.NewPCG(o.seed, 7))
	f.mu.Lock()
	f.pending = o.n
	f.mu.Unlock()
	if o.n == 0 {
		close(f.allDone)
		return
	}
	for i := range o.n {
		r := &feReq{id: fmt.Sprintf("req-%d-%03d", os.Getpid(), i)}
		if o.abortEvery > 0 && (i+1)%o.abortEvery == 0 {
			r.abortAt = 3
		}
		prompt := 64 + rng.IntN(448)
		maxTokens := 12 + rng.IntN(36)
		stopAt := 0
		if rng.IntN(3) == 0 {
			stopAt = 4 + rng.IntN(maxTokens-4)
		}
		tokenize := time.Duration(300+rng.IntN(1500)) * time.Microsecond
		go f.serve(r, prompt, maxTokens, stopAt, tokenize)
		time.Sleep(time.Duration(rng.ExpFloat64() * float64(o.interval)))
	}
}

// serve is one request's arrival, input processing and hand-off.
func (f *frontend) serve(r *feReq, prompt, maxTokens, stopAt int, tokenize time.Duration) {
	f.mu.Lock()
	f.reqs[r.id] = r
	f.mu.Unlock()
	f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindArrived, Time: time.Now(), Model: f.o.model, Operation: "chat"})
	time.Sleep(tokenize) // chat template and tokenizer
	mt := int64(maxTokens)
	temp := 0.7
	f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindInputProcessed, Time: time.Now(), NumPromptTokens: prompt,
		Sampling: &otelstats.SamplingParams{MaxTokens: &mt, Temperature: &temp}})
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.enc.Encode(toEngine{Op: "add", ID: r.id, Prompt: prompt, MaxTokens: maxTokens, StopAt: stopAt})
}

// readEngine detokenizes what the engine sends back.
func (f *frontend) readEngine(conn net.Conn) {
	d := json.NewDecoder(bufio.NewReader(conn))
	for {
		var m toFrontend
		if err := d.Decode(&m); err != nil {
			return
		}
		f.mu.Lock()
		r := f.reqs[m.ID]
		f.mu.Unlock()
		if r == nil || r.finished {
			continue
		}
		switch {
		case m.Tokens > 0:
			start := time.Now()
			detokenize(r, m.Tokens)
			now := time.Now()
			f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindDetokenized, Time: now, NumNewTokens: m.Tokens, Busy: now.Sub(start)})
			r.tokens += m.Tokens
			if r.abortAt > 0 && r.tokens >= r.abortAt {
				// The client hangs up: the frontend aborts, and tells the
				// engine to stop.
				r.finished = true
				f.end(r, otelstats.FinishAbort, time.Now())
				f.mu.Lock()
				_ = f.enc.Encode(toEngine{Op: "abort", ID: r.id})
				f.mu.Unlock()
			}
		case m.Finish != "":
			// Flushing the last chunk to the client takes a moment.
			go func() {
				time.Sleep(2 * time.Millisecond)
				f.end(r, m.Finish, time.Now())
			}()
			r.finished = true
		}
	}
}

// end records the frontend's FINISHED; the caller has marked r finished.
func (f *frontend) end(r *feReq, reason string, at time.Time) {
	f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindFinished, Time: at, FinishReason: reason})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending--
	if f.pending == 0 {
		close(f.allDone)
	}
}

// detokenize stands in for turning token ids into text: a little real work,
// so the reported busy time is a measurement, not a constant.
func detokenize(r *feReq, n int) {
	var b []byte
	for i := range n {
		b = fmt.Appendf(b, "%s:%d ", r.id, r.tokens+i)
	}
	_ = b
}
