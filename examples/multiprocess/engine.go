package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// engReq is one request in the engine core.
type engReq struct {
	id                string
	prompt, maxTokens int
	stopAt            int
	generated         int
	// The current run: tokens to compute before the next token, computed so
	// far (cumulative, counting cache hits), cache hits.
	target, computed, cached int
	runs                     int
	prefilling               bool
}

type engine struct {
	o    *options
	p    *transport.Producer
	out  *bufio.Writer
	conn net.Conn
	log  *slog.Logger

	waiting []*engReq
	running []*engReq
	byID    map[string]*engReq

	preemptions int
}

func runEngine(o *options) error {
	if o.engineAddr == "" || o.collectorAddr == "" {
		return fmt.Errorf("-engine and -collector are required")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("process", "engine", "pid", os.Getpid())
	// Ctrl-C or SIGTERM (a terminal's Ctrl-C reaches a spawned engine
	// too): stop as when the frontend hangs up, aborting what is left and
	// flushing the producer. A second signal ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	p, err := transport.NewProducer(transport.ProducerConfig{
		Addr: o.collectorAddr, Name: fmt.Sprintf("engine-core-%d", os.Getpid()),
		// Announced in the HELLO: from the moment this process connects, a
		// request the frontend finishes waits for the engine's updates
		// still on their way (SPEC §1).
		Side:        otelstats.SideEngine,
		ClockOffset: o.clockOffset, Logger: log,
	})
	if err != nil {
		return err
	}
	a, err := transport.ParseAddr(o.engineAddr)
	if err != nil {
		return err
	}
	// Take work only once the stream is up: a request the frontend
	// finishes before the collector knows an engine is present ends at
	// once, and this engine's updates for it would come after its end.
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Connects == 0 && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(5 * time.Millisecond)
	}
	closeProducer := func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return p.Close(cctx)
	}
	l, err := transport.Listen(a, false)
	if err != nil {
		return errors.Join(err, closeProducer())
	}
	log.Info("waiting for the frontend", "addr", a.String(), "clock_offset", o.clockOffset)
	unblock := context.AfterFunc(ctx, func() { l.Close() })
	conn, err := l.Accept()
	unblock()
	l.Close()
	if err != nil {
		if ctx.Err() != nil { // interrupted before any work
			log.Info("engine stopped", "interrupted", true)
			return closeProducer()
		}
		return errors.Join(err, closeProducer())
	}
	// Interrupted: hang up on the frontend; the loop then aborts what is
	// left, as when the frontend goes away.
	context.AfterFunc(ctx, func() { conn.Close() })
	e := &engine{o: o, p: p, out: bufio.NewWriter(conn), conn: conn, log: log, byID: map[string]*engReq{}}
	msgs := make(chan toEngine, 1024)
	go func() {
		defer close(msgs)
		d := json.NewDecoder(bufio.NewReader(conn))
		for {
			var m toEngine
			if err := d.Decode(&m); err != nil {
				return
			}
			msgs <- m
		}
	}()
	e.loop(msgs)
	conn.Close()
	err = closeProducer()
	st := p.Stats()
	log.Info("engine stopped", "preemptions", e.preemptions, "updates_sent", st.Sent, "dropped", st.Dropped, "lost", st.Lost,
		"interrupted", ctx.Err() != nil)
	return err
}

func (e *engine) send(u otelstats.Update) {
	u.Side = otelstats.SideEngine
	e.p.Send(u)
}

// loop runs scheduler steps until the frontend hangs up.
func (e *engine) loop(msgs <-chan toEngine) {
	open := true
	for open || len(e.byID) > 0 {
		open = e.receive(msgs, open)
		if len(e.byID) > 0 {
			e.step()
		}
	}
}

// receive takes what the frontend sent: it waits only when there is no work.
// It returns whether the frontend is still connected.
func (e *engine) receive(msgs <-chan toEngine, open bool) bool {
	for open {
		var m toEngine
		var ok bool
		if len(e.byID) == 0 {
			m, ok = <-msgs
		} else {
			select {
			case m, ok = <-msgs:
			default:
				return true
			}
		}
		if !ok {
			// The frontend is gone: everything left is aborted.
			now := time.Now()
			for _, r := range e.byID {
				e.running = remove(e.running, r)
				e.finish(r, otelstats.FinishAbort, now, false)
			}
			return false
		}
		e.handle(m)
	}
	return false
}

func (e *engine) handle(m toEngine) {
	now := time.Now()
	switch m.Op {
	case "add":
		r := &engReq{id: m.ID, prompt: m.Prompt, maxTokens: m.MaxTokens, stopAt: m.StopAt}
		e.byID[r.id] = r
		e.waiting = append(e.waiting, r)
		e.send(otelstats.Update{RequestID: r.id, Kind: otelstats.KindQueued, Time: now})
	case "abort":
		if r := e.byID[m.ID]; r != nil {
			e.running = remove(e.running, r)
			e.finish(r, otelstats.FinishAbort, now, false)
		}
	}
}

// step is one scheduler iteration: admit, prefill chunks, sleep for the
// forward pass, emit tokens, finish and preempt.
func (e *engine) step() {
	start := time.Now()
	// Admit waiting requests while the batch and the KV cache allow.
	for len(e.waiting) > 0 && len(e.running) < e.o.batch {
		r := e.waiting[0]
		if e.kvUsed()+r.prompt+r.generated > e.o.kvTokens && len(e.running) > 0 {
			break
		}
		e.waiting = e.waiting[1:]
		r.runs++
		r.target = r.prompt + r.generated
		r.computed, r.cached = 0, 0
		if r.runs == 1 {
			// The toy prefix cache: a shared system prompt of 32 tokens.
			r.cached = min(32, r.prompt)
			r.computed = r.cached
		}
		r.prefilling = true
		e.running = append(e.running, r)
	}
	for _, r := range e.running {
		if !r.prefilling {
			continue
		}
		r.computed = min(r.computed+e.o.chunk, r.target)
		e.send(otelstats.Update{RequestID: r.id, Kind: otelstats.KindPrefilling, Time: start,
			NumComputedTokens: r.computed, NumCachedTokens: r.cached})
	}

	// The forward pass.
	time.Sleep(e.o.step)
	end := time.Now()

	var keep []*engReq
	for _, r := range e.running {
		if r.prefilling && r.computed < r.target {
			keep = append(keep, r)
			continue
		}
		r.prefilling = false
		r.generated++
		e.send(otelstats.Update{RequestID: r.id, Kind: otelstats.KindDecoding, Time: end, NumNewTokens: 1})
		e.tell(toFrontend{ID: r.id, Tokens: 1})
		switch {
		case r.stopAt > 0 && r.generated >= r.stopAt:
			e.finish(r, otelstats.FinishStop, end, true)
		case r.generated >= r.maxTokens:
			e.finish(r, otelstats.FinishLength, end, true)
		default:
			keep = append(keep, r)
		}
	}
	e.running = keep
	// KV pressure: preempt the most recently admitted request (vLLM's
	// recompute policy) until the rest fit.
	for len(e.running) > 1 && e.kvUsed() > e.o.kvTokens {
		r := e.running[len(e.running)-1]
		e.running = e.running[:len(e.running)-1]
		r.prefilling = false
		e.waiting = append([]*engReq{r}, e.waiting...)
		e.preemptions++
		e.send(otelstats.Update{RequestID: r.id, Kind: otelstats.KindPreempted, Time: end})
	}
	_ = e.out.Flush()
}

func (e *engine) kvUsed() int {
	n := 0
	for _, r := range e.running {
		n += r.prompt + r.generated
	}
	return n
}

// finish records the engine's FINISHED and, when tell, tells the frontend.
// The caller takes r out of the running batch.
func (e *engine) finish(r *engReq, reason string, at time.Time, tell bool) {
	delete(e.byID, r.id)
	e.waiting = remove(e.waiting, r)
	e.send(otelstats.Update{RequestID: r.id, Kind: otelstats.KindFinished, Time: at, FinishReason: reason})
	if tell {
		e.tell(toFrontend{ID: r.id, Finish: reason})
	}
}

func (e *engine) tell(m toFrontend) {
	b, _ := json.Marshal(m)
	_, _ = e.out.Write(append(b, '\n'))
}

func remove(s []*engReq, r *engReq) []*engReq {
	for i, x := range s {
		if x == r {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}
