package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmtrace/llmtrace/internal/anchor"
	"github.com/llmtrace/llmtrace/otelstats"
)

// processStart is the origin of this process's monotonic timestamps: the
// process's one anchor, which its trackers share.
var processStart = anchor.Start()

// Defaults of a Producer.
const (
	DefaultProducerBuffer = 8192
	DefaultMinBackoff     = 20 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
	DefaultWriteTimeout   = time.Second
	DefaultPingInterval   = 30 * time.Second
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	// Addr is the collector's address, "unix:PATH" or "tcp:HOST:PORT".
	Addr string
	// Name identifies the producer in the collector's logs.
	Name string
	// JSON sends JSON lines (with wall-clock ts) instead of binary frames.
	JSON bool
	// Buffer bounds the updates waiting to be written (default 8,192); Send
	// drops when it is full.
	Buffer int
	// MinBackoff and MaxBackoff bound the wait between connection attempts
	// (defaults 20 ms and 2 s, doubling).
	MinBackoff, MaxBackoff time.Duration
	// WriteTimeout bounds one write; a collector that stops reading for
	// longer costs the connection, never the engine (default 1 s).
	WriteTimeout time.Duration
	// ClockOffset is added to this producer's idea of wall time: its clock
	// anchor and any time without a monotonic reading. For demonstrating and
	// testing skew between processes; leave it zero.
	ClockOffset time.Duration
	// Side is the side whose updates this producer sends, announced in its
	// HELLO so the collector counts the side as present from the moment it
	// connects (SPEC §1); SideAuto announces none. With SideEngine, a
	// FINISHED sent without a side goes as the engine's (on the wire, a
	// FINISHED without one is the frontend's).
	Side otelstats.Side
	// Token is the collector's shared token (its -token-file), sent in
	// every HELLO; empty when the collector asks for none.
	Token string
	// PingInterval is how long the connection may stay silent before the
	// producer sends a PING, so the collector's idle timeout keeps it open
	// (default 30 s; negative: never).
	PingInterval time.Duration
	// Logger gets connection events; none when nil.
	Logger *slog.Logger
}

// ProducerStats count a Producer's updates.
type ProducerStats struct {
	Queued   int64 // accepted by Send
	Sent     int64 // written to the connection
	Dropped  int64 // refused by Send (buffer full or closed), larger than a collector takes, or unsent at Close
	Lost     int64 // encoded, but the connection failed while writing them
	Connects int64 // connections established
}

// Producer sends updates to a Collector over a Unix socket or TCP. Send
// never blocks: updates wait in a bounded buffer for one writer goroutine,
// which batches them into as few writes as possible and re-dials with
// exponential backoff when the connection is lost. It connects as soon as
// it is created; each connection starts with the stream header and a HELLO
// carrying the producer's clock anchor, written at once;
// updates whose time has a monotonic reading (time.Now) are sent on the
// monotonic clock. A Producer is safe for concurrent use.
type Producer struct {
	cfg  ProducerConfig
	addr Addr
	log  *slog.Logger

	ch     chan otelstats.Update
	stop   chan struct{}
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	once   sync.Once

	connMu sync.Mutex
	conn   net.Conn

	anchorWall, anchorMono int64

	n struct{ queued, sent, dropped, lost, connects atomic.Int64 }
}

// NewProducer starts a producer. It connects in the background; updates sent
// before the collector is up wait in the buffer (and are dropped when it
// fills).
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	a, err := ParseAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultProducerBuffer
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if len(cfg.Token) > MaxTokenLen {
		return nil, fmt.Errorf("transport: ProducerConfig.Token is longer than %d bytes", MaxTokenLen)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		cfg: cfg, addr: a, log: lg,
		ch:         make(chan otelstats.Update, cfg.Buffer),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		ctx:        ctx,
		cancel:     cancel,
		anchorWall: anchor.StartUnixNano() + int64(now.Sub(processStart)) + int64(cfg.ClockOffset),
		anchorMono: int64(now.Sub(processStart)),
	}
	go p.run()
	return p, nil
}

// Send queues u without blocking. It returns false, and counts a drop, when
// the buffer is full or the producer is closed.
func (p *Producer) Send(u otelstats.Update) bool {
	if p.closed.Load() {
		p.n.dropped.Add(1)
		return false
	}
	select {
	case p.ch <- u:
		p.n.queued.Add(1)
		return true
	default:
		p.n.dropped.Add(1)
		return false
	}
}

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	return ProducerStats{
		Queued: p.n.queued.Load(), Sent: p.n.sent.Load(), Dropped: p.n.dropped.Load(),
		Lost: p.n.lost.Load(), Connects: p.n.connects.Load(),
	}
}

// Close stops accepting updates and writes what is buffered, until ctx ends;
// then it closes the connection. Updates it could not write are counted as
// dropped. It returns ctx's error when ctx ended first.
func (p *Producer) Close(ctx context.Context) error {
	p.once.Do(func() {
		p.closed.Store(true)
		close(p.stop)
	})
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.cancel()
		p.connMu.Lock()
		if p.conn != nil {
			_ = p.conn.Close()
		}
		p.connMu.Unlock()
		<-p.done
		return ctx.Err()
	}
}

// stamp is how u's time travels: on the monotonic clock when it has a
// monotonic reading, else as wall time.
func (p *Producer) stamp(t time.Time) Stamp {
	if t != t.Round(0) {
		if m := t.Sub(processStart); m >= 0 {
			return Stamp{Ns: int64(m), Mono: true}
		}
	}
	return Stamp{Ns: t.UnixNano() + int64(p.cfg.ClockOffset)}
}

// hello is the anchor sent at the start of a connection: the monotonic clock
// now, and the wall time the producer's one anchor maps it to.
func (p *Producer) hello() Hello {
	mono := int64(time.Since(processStart))
	return Hello{Producer: p.cfg.Name, MonoNs: mono, WallNs: p.anchorWall + (mono - p.anchorMono),
		Side: p.cfg.Side, Token: p.cfg.Token}
}

func (p *Producer) appendHeader(dst []byte) []byte {
	h := p.hello()
	if !p.cfg.JSON {
		return AppendHello(AppendHeader(dst), h)
	}
	name, _ := json.Marshal(h.Producer)
	dst = append(dst, `{"type":"HELLO","producer":`...)
	dst = append(dst, name...)
	dst = append(dst, `,"wall_ts":`...)
	dst = appendSeconds(dst, h.WallNs)
	dst = append(dst, `,"mono_ts":`...)
	dst = appendSeconds(dst, h.MonoNs)
	if h.Side == otelstats.SideFrontend || h.Side == otelstats.SideEngine {
		dst = append(dst, `,"side":"`...)
		dst = append(dst, h.Side.String()...)
		dst = append(dst, '"')
	}
	if h.Token != "" {
		tok, _ := json.Marshal(h.Token)
		dst = append(dst, `,"token":`...)
		dst = append(dst, tok...)
	}
	return append(dst, "}\n"...)
}

func (p *Producer) appendUpdate(dst []byte, u *otelstats.Update) []byte {
	if v := *u; capStrings(&v) {
		// A long string costs the string, cut as the collector would,
		// not the update (a 5 MiB stop string made it larger than any
		// collector takes).
		u = &v
	}
	if u.Kind == otelstats.KindFinished && u.Side == otelstats.SideAuto && p.cfg.Side == otelstats.SideEngine {
		// A FINISHED without a side is the frontend's on the wire; an
		// engine producer's is the engine's.
		v := *u
		v.Side = otelstats.SideEngine
		u = &v
	}
	s := p.stamp(u.Time)
	if !p.cfg.JSON {
		return AppendUpdate(dst, u, s)
	}
	ns := s.Ns
	if s.Mono {
		ns = p.anchorWall + (s.Ns - p.anchorMono)
	}
	v := *u
	v.Time = time.Unix(0, ns)
	return AppendUpdateJSON(dst, &v)
}

// appendSeconds writes ns as decimal seconds with nine fraction digits.
func appendSeconds(dst []byte, ns int64) []byte {
	if ns < 0 {
		ns = 0
	}
	dst = strconv.AppendInt(dst, ns/1e9, 10)
	frac := strconv.FormatInt(ns%1e9, 10)
	dst = append(dst, '.')
	for i := len(frac); i < 9; i++ {
		dst = append(dst, '0')
	}
	return append(dst, frac...)
}

const (
	maxBatchUpdates = 1024
	maxBatchBytes   = 32 << 10
)

// writer is the state of the Producer's one writer goroutine.
type writer struct {
	p        *Producer
	conn     net.Conn
	buf      []byte
	backoff  time.Duration
	stopping bool // Close was called: drain what is buffered, then end
	ping     *pingTimer
}

func (p *Producer) run() {
	defer close(p.done)
	defer p.cancel()
	w := &writer{p: p, backoff: p.cfg.MinBackoff, ping: newPingTimer(p.cfg.PingInterval)}
	defer w.ping.stop()
	defer func() {
		if w.conn != nil {
			w.drop()
		}
		// What is left was never written.
		p.n.dropped.Add(int64(len(p.ch)))
	}()
	for {
		if w.conn == nil {
			if !w.connect() {
				return
			}
			continue
		}
		u, ok := w.next()
		if !ok {
			return
		}
		if u != nil {
			w.send(u)
		}
	}
}

func (w *writer) drop() {
	_ = w.conn.Close()
	w.conn = nil
	w.p.connMu.Lock()
	w.p.conn = nil
	w.p.connMu.Unlock()
}

// connect dials and writes the stream's header and HELLO, or waits out a
// backoff; false means the producer is done (closing, nobody to send to).
func (w *writer) connect() bool {
	p := w.p
	// Connect eagerly, and send the clock anchor at once: the HELLO's
	// timing is what a collector aligning clocks measures.
	c, err := p.dial()
	if err == nil {
		w.conn = c
		w.buf = p.appendHeader(w.buf[:0])
		_ = c.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout))
		if _, err = c.Write(w.buf); err != nil {
			w.drop()
		}
	}
	if err == nil {
		w.backoff = p.cfg.MinBackoff
		w.ping.reset()
		p.n.connects.Add(1)
		p.log.Info("connected to collector", "addr", p.addr.String())
		return true
	}
	if w.stopping || p.ctx.Err() != nil {
		return false
	}
	p.log.Debug("collector unreachable", "addr", p.addr.String(), "err", err, "retry_in", w.backoff)
	t := time.NewTimer(w.backoff)
	select {
	case <-t.C:
	case <-p.stop:
		w.stopping = true
		t.Stop()
	case <-p.ctx.Done():
		t.Stop()
	}
	w.backoff = min(2*w.backoff, p.cfg.MaxBackoff)
	return true
}

// next waits for the next update to send; a nil update with ok means there
// is nothing to send now (a ping went out, or Close began); !ok ends the
// writer.
func (w *writer) next() (u *otelstats.Update, ok bool) {
	p := w.p
	var v otelstats.Update
	if w.stopping {
		select {
		case v = <-p.ch:
		default:
			return nil, false // drained
		}
	} else {
		select {
		case v = <-p.ch:
		case <-p.stop:
			w.stopping = true
			return nil, true
		case <-p.ctx.Done():
			return nil, false
		case <-w.ping.C():
			if !p.ping(w.conn) {
				w.drop()
			}
			w.ping.reset()
			return nil, true
		}
	}
	if p.ctx.Err() != nil {
		p.n.dropped.Add(1)
		return nil, false
	}
	return &v, true
}

// send writes u and whatever else is buffered, up to a batch, in one write.
func (w *writer) send(u *otelstats.Update) {
	p := w.p
	n := 0
	w.buf = w.buf[:0]
	if w.add(u) {
		n++
	}
batch:
	for n < maxBatchUpdates && len(w.buf) < maxBatchBytes {
		select {
		case v := <-p.ch:
			if w.add(&v) {
				n++
			}
		default:
			break batch
		}
	}
	if n == 0 {
		return
	}
	_ = w.conn.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout))
	w.ping.reset()
	if _, err := w.conn.Write(w.buf); err != nil {
		p.n.lost.Add(int64(n))
		p.log.Warn("lost the collector connection", "addr", p.addr.String(), "err", err, "lost_updates", n)
		w.drop()
		return
	}
	p.n.sent.Add(int64(n))
	if cap(w.buf) > 1<<20 {
		w.buf = nil // one large update must not pin its buffer for the producer's life
	}
}

// add appends u's encoding to w.buf, unless it is larger than a collector
// takes (DefaultMaxFrame, DefaultMaxLine): such a frame ends the stream
// at the collector, and every update written after it on the connection
// with it, so it is dropped here and counted, and the stream goes on.
func (w *writer) add(u *otelstats.Update) bool {
	start := len(w.buf)
	w.buf = w.p.appendUpdate(w.buf, u)
	size, limit := len(w.buf)-start-4, DefaultMaxFrame // the frame's length prefix
	if w.p.cfg.JSON {
		size, limit = len(w.buf)-start-1, DefaultMaxLine // the line's newline
	}
	if size <= limit {
		return true
	}
	w.buf = w.buf[:start]
	w.p.n.dropped.Add(1)
	w.p.log.Warn("dropped an update larger than a collector takes", "request_id", u.RequestID, "kind", u.Kind.String(), "bytes", size, "limit", limit)
	return false
}

// ping writes a PING (an empty line in JSON); false means the connection
// failed.
func (p *Producer) ping(conn net.Conn) bool {
	b := []byte{'\n'}
	if !p.cfg.JSON {
		b = AppendPing(nil)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(p.cfg.WriteTimeout))
	if _, err := conn.Write(b); err != nil {
		p.log.Warn("lost the collector connection", "addr", p.addr.String(), "err", err)
		return false
	}
	return true
}

// pingTimer fires after the connection was silent for its interval; a
// negative interval never fires.
type pingTimer struct {
	d time.Duration
	t *time.Timer
}

func newPingTimer(d time.Duration) *pingTimer {
	pt := &pingTimer{d: d}
	if d > 0 {
		pt.t = time.NewTimer(d)
	}
	return pt
}

// C is nil (never ready) when pings are off.
func (pt *pingTimer) C() <-chan time.Time {
	if pt.t == nil {
		return nil
	}
	return pt.t.C
}

func (pt *pingTimer) reset() {
	if pt.t != nil {
		pt.t.Reset(pt.d)
	}
}

func (pt *pingTimer) stop() {
	if pt.t != nil {
		pt.t.Stop()
	}
}

func (p *Producer) dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, time.Second)
	defer cancel()
	c, err := Dial(ctx, p.addr)
	if err != nil {
		return nil, err
	}
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.ctx.Err() != nil {
		_ = c.Close()
		return nil, errors.New("transport: producer closed")
	}
	p.conn = c
	return c, nil
}
