package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
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
	abortAt  int  // the client disconnects after this many tokens (0: never)
	finished bool // guarded by frontend.mu
}

// errInterrupted says the frontend stopped at a signal (Ctrl-C, SIGTERM),
// after aborting its open requests and flushing what was recorded.
var errInterrupted = errors.New("interrupted")

type frontend struct {
	o    *options
	log  *slog.Logger
	sink func(otelstats.Update)

	mu      sync.Mutex
	enc     *json.Encoder
	reqs    map[string]*feReq
	pending int // requests sent and not ended, plus one while generating
	allDone chan struct{}
	// waitEngine, with the collector in this process, waits for the
	// engine's stream.
	waitEngine func(context.Context)
}

func runFrontend(o *options) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", "frontend", "pid", os.Getpid())
	// Ctrl-C or SIGTERM: stop sending requests, abort the open ones (as a
	// server going away does), and shut down as at the end of a run: the
	// engine's last updates read, every span and metric flushed, the
	// summary printed, the sockets' directory removed. A second signal
	// ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
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

	conn, err := dialRetry(ctx, o.engineAddr, 10*time.Second)
	if err != nil {
		if child != nil {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
		if ferr := finishCollector(); ctx.Err() != nil {
			return errors.Join(errInterrupted, ferr)
		}
		return err
	}
	if f.waitEngine != nil {
		f.waitEngine(ctx)
	}
	f.mu.Lock()
	f.enc = json.NewEncoder(conn)
	f.mu.Unlock()
	go f.readEngine(conn)
	f.generate(ctx)

	select {
	case <-f.allDone:
	case <-ctx.Done():
		log.Info("interrupted: aborting the open requests")
		f.abortAll()
	case <-time.After(2 * time.Minute):
		f.mu.Lock()
		pending := f.pending
		f.mu.Unlock()
		log.Error("requests did not finish in time", "pending", pending)
	}
	// The engine aborts whatever is left and exits when we hang up.
	conn.Close()
	if child != nil {
		if err := child.Wait(); err != nil && ctx.Err() == nil {
			log.Error("engine exited", "err", err)
		}
	}
	err = finishCollector()
	if ctx.Err() != nil {
		return errors.Join(errInterrupted, err)
	}
	return err
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
	f.waitEngine = func(ctx context.Context) {
		deadline := time.Now().Add(10 * time.Second)
		for col.Stats().Hellos == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
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

func dialRetry(ctx context.Context, addr string, within time.Duration) (net.Conn, error) {
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
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("engine at %s: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// generate sends o.n requests with exponential gaps between arrivals, or
// fewer when ctx ends first.
func (f *frontend) generate(ctx context.Context) {
	o := f.o
	rng := rand.New(rand.NewPCG(o.seed, 7))
	f.mu.Lock()
	f.pending++ // the generator's own: allDone waits for the last request sent
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.pending--
		if f.pending == 0 {
			close(f.allDone)
		}
	}()
	for i := range o.n {
		if ctx.Err() != nil {
			return
		}
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
		// The arrival, here: once sent, a request is open until it ends,
		// and an interruption aborts it.
		f.mu.Lock()
		f.reqs[r.id] = r
		f.pending++
		f.mu.Unlock()
		f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindArrived, Time: time.Now(), Model: f.o.model, Operation: "chat"})
		go f.serve(r, prompt, maxTokens, stopAt, tokenize)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rng.ExpFloat64() * float64(o.interval))):
		}
	}
}

// serve is one request's input processing and hand-off.
func (f *frontend) serve(r *feReq, prompt, maxTokens, stopAt int, tokenize time.Duration) {
	time.Sleep(tokenize) // chat template and tokenizer
	mt := int64(maxTokens)
	temp := 0.7
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.finished { // aborted while it was tokenized
		return
	}
	f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindInputProcessed, Time: time.Now(), NumPromptTokens: prompt,
		Sampling: &otelstats.SamplingParams{MaxTokens: &mt, Temperature: &temp}})
	_ = f.enc.Encode(toEngine{Op: "add", ID: r.id, Prompt: prompt, MaxTokens: maxTokens, StopAt: stopAt})
}

// abortAll ends every open request as a server going away does: the
// frontend records the abort and tells the engine to stop it.
func (f *frontend) abortAll() {
	now := time.Now()
	var open []*feReq
	f.mu.Lock()
	for _, r := range f.reqs {
		if !r.finished {
			r.finished = true
			open = append(open, r)
			_ = f.enc.Encode(toEngine{Op: "abort", ID: r.id})
		}
	}
	f.mu.Unlock()
	for _, r := range open {
		f.end(r, otelstats.FinishAbort, now)
	}
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
		open := r != nil && !r.finished
		f.mu.Unlock()
		if !open {
			continue
		}
		switch {
		case m.Tokens > 0:
			start := time.Now()
			detokenize(r, m.Tokens)
			now := time.Now()
			r.tokens += m.Tokens
			f.mu.Lock()
			if r.finished { // aborted meanwhile
				f.mu.Unlock()
				continue
			}
			f.sink(otelstats.Update{RequestID: r.id, Kind: otelstats.KindDetokenized, Time: now, NumNewTokens: m.Tokens, Busy: now.Sub(start)})
			hangUp := r.abortAt > 0 && r.tokens >= r.abortAt
			if hangUp {
				// The client hangs up: the frontend aborts, and tells the
				// engine to stop.
				r.finished = true
				_ = f.enc.Encode(toEngine{Op: "abort", ID: r.id})
			}
			f.mu.Unlock()
			if hangUp {
				f.end(r, otelstats.FinishAbort, time.Now())
			}
		case m.Finish != "":
			f.mu.Lock()
			ends := !r.finished
			r.finished = true
			f.mu.Unlock()
			if ends {
				// Flushing the last chunk to the client takes a moment.
				go func() {
					time.Sleep(2 * time.Millisecond)
					f.end(r, m.Finish, time.Now())
				}()
			}
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
