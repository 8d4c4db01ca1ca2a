package transport

import (
	"bufio"
	"container/list"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/internal/gunzip"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Defaults of the Collector's bounds.
const (
	DefaultQueueSize   = 1 << 16
	DefaultWorkers     = 2
	DefaultMaxLine     = 64 << 10
	DefaultMaxBody     = 32 << 20
	DefaultMaxConns    = 1024
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultHelloTimeout is as long as net/http's usual ReadHeaderTimeout:
	// the Producer sends its HELLO the moment it connects.
	DefaultHelloTimeout = 10 * time.Second
)

// Config configures a Collector.
type Config struct {
	// Tracker receives every decoded update. Required.
	Tracker *otelstats.Tracker
	// QueueSize bounds the updates decoded but not yet recorded; when it is
	// full, updates are dropped and counted (default 65,536).
	QueueSize int
	// Workers record updates into the tracker in parallel; updates of one
	// request id always go to the same worker, so their order is kept
	// (default 2).
	Workers int
	// MaxFrame bounds a binary frame (default 64 KiB), MaxLine a JSON line
	// (default 64 KiB), MaxBody an HTTP body (default 32 MiB).
	MaxFrame, MaxLine int
	MaxBody           int64
	// DrainGrace is how long Close lets open connections deliver what was
	// already sent (default 200 ms).
	DrainGrace time.Duration
	// MaxConns caps the producer connections open at once, over every
	// listener given to Serve and a Server's HTTP listener together; one
	// beyond it closes the oldest connection whose producer has not proven
	// itself — authenticated where Token is asked, else delivered a HELLO
	// or an update — counted as evicted, or, when every one has, is
	// accepted and closed at once, counted as refused (default 1,024). A
	// proven producer is never evicted. Keep it below the process's
	// file-descriptor limit: at that limit accepting fails, and Serve backs
	// off and retries.
	MaxConns int
	// IdleTimeout closes a connection that delivers no byte for this long,
	// counted as timeout (default 2 min; negative: never). A Producer sends
	// a PING every ProducerConfig.PingInterval (30 s) while it has nothing
	// to send, so only dead or hostile peers are closed.
	IdleTimeout time.Duration
	// HelloTimeout closes a stream connection that must present the token
	// and has not delivered its HELLO carrying it this long after
	// connecting, counted as timeout, or as unauthorized when it stops
	// inside a JSON line (default 10 s; negative: never): a peer without
	// the token holds no connection for longer, however it trickles
	// bytes. Trusted listeners and HTTP (bounded by the Server's
	// ReadHeaderTimeout and ReadTimeout) have no such bound.
	HelloTimeout time.Duration
	// Token, when set, must be presented by every producer that connects
	// over TCP or HTTP: the first frame or line of its stream is a HELLO
	// carrying it (an HTTP request may send "Authorization: Bearer TOKEN"
	// instead). A stream without it is ended and counted as unauthorized.
	// Unix sockets (guarded by the socket file's permissions) and
	// ServeStream's streams are trusted.
	Token string
	// AlignClocks maps each stream onto the collector's wall clock: the
	// difference between the collector's clock when a HELLO arrives and the
	// HELLO's wall time is added to every time of the stream. Use it for
	// producers on the same host (Unix socket, loopback, stdin), where a
	// HELLO arrives within microseconds, so a producer whose wall clock is
	// off still lines up with the others. The alignment is as precise as
	// the HELLO's delivery (the Producer sends it the moment it connects);
	// it never moves within a stream, nor across a producer's streams: a
	// producer that reconnects, or an HTTP producer's next body, keeps the
	// alignment its first HELLO measured (a producer is known by its
	// HELLO's name and the difference between its wall and monotonic
	// readings, or by its name alone when its HELLOs carry no monotonic
	// reading), so a side's times keep their order.
	// Without it the producer's own anchor is trusted (SPEC §5) and skew is
	// clamped by the span builder.
	AlignClocks bool
	// Logger gets connection events and, at debug level, every rejection.
	Logger *slog.Logger
	// MeterProvider receives the collector's own counters (see Stats);
	// none when nil.
	MeterProvider metric.MeterProvider
	// OnReject, when set, is called with every update rejected at decoding
	// or by the tracker, from the goroutine that rejected it.
	OnReject func(*otelstats.RejectError)

	// now is the collector's clock (tests).
	now func() time.Time
}

// Stats are the collector's counters since it started.
type Stats struct {
	Streams       int64 // streams served (connections, stdin, HTTP bodies)
	ActiveStreams int64
	Hellos        int64
	Updates       int64 // decoded and queued
	Recorded      int64 // accepted by the tracker (see HeldRejected)
	Rejected      int64 // rejected at decoding or by the tracker
	Dropped       int64 // found the queue full (or the collector closed)
	Malformed     int64 // lines or frames that did not decode
	Truncated     int64 // streams that ended inside a line or frame
	Oversized     int64 // lines or frames above the limit
	Garbage       int64 // streams that began with neither a header nor JSON
	NoAnchor      int64 // monotonic times before any HELLO
	Refused       int64 // connections closed at once: MaxConns were open
	Unauthorized  int64 // streams ended for want of the token
	TimedOut      int64 // streams closed by IdleTimeout or HelloTimeout (or an HTTP read timeout)
	AcceptErrors  int64 // failed accepts (the file-descriptor limit, …), retried
	Evicted       int64 // connections whose producer was not proven yet (see MaxConns), closed at MaxConns to admit a new one
}

// StreamStats count what one stream carried.
type StreamStats struct {
	Producer  string `json:"producer,omitempty"`
	Encoding  string `json:"encoding,omitempty"` // "binary" or "json"
	Hellos    int64  `json:"hellos"`
	Updates   int64  `json:"updates"`
	Dropped   int64  `json:"dropped"`
	Rejected  int64  `json:"rejected"`
	Malformed int64  `json:"malformed"`
	Truncated int64  `json:"truncated"`
	Oversized int64  `json:"oversized"`
	Garbage   int64  `json:"garbage"`
	NoAnchor  int64  `json:"no_anchor"`
	// Unauthorized is 1 when the stream was ended for want of the token.
	Unauthorized int64 `json:"unauthorized,omitempty"`
	// TimedOut is 1 when the stream was closed for delivering nothing.
	TimedOut int64 `json:"timed_out,omitempty"`
	// Err is the read error that ended the stream, if any but EOF.
	Err error `json:"-"`
}

// Collector turns update streams from engines in other processes into
// tracker updates. Create it with NewCollector, feed it with Serve,
// ServeStream or its HTTP handler, and end it with Close.
type Collector struct {
	cfg    Config
	tr     *otelstats.Tracker
	log    *slog.Logger
	logs   logLimit // of the stream-end lines
	seed   maphash.Seed
	queues []chan item

	qmu    sync.RWMutex // held for reading while enqueueing; closed under the write lock
	closed bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	// pending are the connections, stream and HTTP, whose producer is not
	// proven yet, oldest first: at MaxConns a new connection closes the
	// oldest of them instead of being refused (see slot).
	pending  list.List // of *slot
	connWG   sync.WaitGroup
	workerWG sync.WaitGroup
	shutdown chan struct{}
	drainAt  atomic.Int64 // Unix ns: the read deadline of Close's drain

	open      atomic.Int64 // connections held, against MaxConns
	lastLog   atomic.Int64 // Unix ns of the last accept-error log line
	readers   sync.Pool    // *bufio.Reader of the stream buffer's size
	bufSize   int
	needsAuth func(net.Addr) bool
	httpSides httpPresence
	clocks    producerClocks // AlignClocks' alignments, by producer clock

	n struct {
		streams, active, hellos, updates, recorded, rejected, dropped atomic.Int64
		malformed, truncated, oversized, garbage, noAnchor            atomic.Int64
		refused, unauthorized, timedOut, acceptErrs, evicted          atomic.Int64
	}
	inst collectorInstruments
}

// NewCollector starts a collector's workers.
func NewCollector(cfg Config) (*Collector, error) {
	if cfg.Tracker == nil {
		return nil, errors.New("transport: Config.Tracker is required")
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = DefaultMaxLine
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = 200 * time.Millisecond
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.HelloTimeout == 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if len(cfg.Token) > MaxTokenLen {
		return nil, fmt.Errorf("transport: Config.Token is longer than %d bytes", MaxTokenLen)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Collector{
		cfg:       cfg,
		tr:        cfg.Tracker,
		log:       lg,
		seed:      maphash.MakeSeed(),
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		shutdown:  make(chan struct{}),
		bufSize:   max(cfg.MaxFrame+4, cfg.MaxLine+2, 4096), // a line, CR and LF
		needsAuth: func(a net.Addr) bool { return cfg.Token != "" && a != nil && strings.HasPrefix(a.Network(), "tcp") },
	}
	if err := c.inst.init(cfg.MeterProvider); err != nil {
		return nil, err
	}
	per := max(cfg.QueueSize/cfg.Workers, 1)
	c.queues = make([]chan item, cfg.Workers)
	for i := range c.queues {
		q := make(chan item, per)
		c.queues[i] = q
		c.workerWG.Add(1)
		go c.work(q)
	}
	return c, nil
}

// item is what a worker queue carries: an update, or a barrier.
type item struct {
	u otelstats.Update
	b *barrier
}

// barrier runs release once every worker has recorded what was queued
// before it: a stream's sides stay present until the tracker has applied
// all the stream sent (a frontend whose ARRIVED is applied after its
// stream closed is still present when the engine's held FINISHED follows).
type barrier struct {
	n       atomic.Int32
	release func()
}

func (b *barrier) pass() {
	if b.n.Add(-1) == 0 {
		b.release()
	}
}

// afterQueued calls release once everything queued so far is recorded,
// at once when the collector is closed. It never blocks: when a worker's
// queue is full, a goroutine waits for room (holding the read lock, so
// Close cannot close the queues under it).
func (c *Collector) afterQueued(release func()) {
	c.qmu.RLock()
	if c.closed {
		c.qmu.RUnlock()
		release()
		return
	}
	b := &barrier{release: release}
	b.n.Store(int32(len(c.queues)))
	var full []chan item
	for _, q := range c.queues {
		select {
		case q <- item{b: b}:
		default:
			full = append(full, q)
		}
	}
	if len(full) == 0 {
		c.qmu.RUnlock()
		return
	}
	go func() {
		defer c.qmu.RUnlock()
		for _, q := range full {
			q <- item{b: b}
		}
	}()
}

func (c *Collector) work(q chan item) {
	defer c.workerWG.Done()
	for it := range q {
		if it.b != nil {
			it.b.pass()
			continue
		}
		if err := c.tr.Record(it.u); err != nil {
			c.n.rejected.Add(1)
			var re *otelstats.RejectError
			if errors.As(err, &re) {
				c.rejectedHook(re)
			}
			continue
		}
		c.n.recorded.Add(1)
	}
}

// HeldRejected counts re, a rejection the tracker made after Record had
// accepted the update — one held for its request's ARRIVED that expired
// (unknown_request) or broke a rule when the ARRIVED came — as this
// collector's: the update moves from Recorded to Rejected, and Logger and
// OnReject see it as they see the others. Pass it to the tracker's
// otelstats.WithOnReject when the collector is what feeds the tracker
// (`llmtrace collect` does); otherwise Recorded counts such updates.
func (c *Collector) HeldRejected(re *otelstats.RejectError) {
	c.n.recorded.Add(-1)
	c.n.rejected.Add(1)
	c.rejectedHook(re)
}

func (c *Collector) rejectedHook(re *otelstats.RejectError) {
	c.log.Debug("update rejected", "err", re)
	if c.cfg.OnReject != nil {
		c.cfg.OnReject(re)
	}
}

// enqueue hands u to its worker without blocking; false means dropped.
func (c *Collector) enqueue(u *otelstats.Update) bool {
	c.qmu.RLock()
	defer c.qmu.RUnlock()
	if c.closed {
		return false
	}
	q := c.queues[0]
	if len(c.queues) > 1 {
		q = c.queues[maphash.String(c.seed, u.RequestID)%uint64(len(c.queues))]
	}
	select {
	case q <- item{u: *u}:
		return true
	default:
		return false
	}
}

// Serve accepts connections on l until the collector is closed, reading
// each as a stream. It returns nil after Close, and l's error when l was
// closed by someone else. Any other accept error (the file-descriptor limit,
// a connection aborted before it was accepted) is counted and retried after
// a backoff of 5 ms doubling to 1 s, as net/http does: a flood never ends
// the collector. A connection beyond Config.MaxConns takes the slot of the
// oldest one whose producer is not proven (evicted), or is closed at once
// (refused).
func (c *Collector) Serve(l net.Listener) error {
	c.mu.Lock()
	if c.isShutdown() {
		c.mu.Unlock()
		_ = l.Close()
		return nil
	}
	c.listeners[l] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.listeners, l)
		c.mu.Unlock()
	}()
	needAuth := c.needsAuth(l.Addr())
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if c.isShutdown() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = c.acceptFailed(err, backoff)
			if !pause(backoff, c.shutdown) {
				return nil
			}
			continue
		}
		backoff = 0
		if !c.admitConn() && !c.evictPending() {
			c.refuse()
			_ = conn.Close()
			continue
		}
		ic := c.newIdleConn(conn, needAuth)
		c.mu.Lock()
		if c.isShutdown() {
			c.mu.Unlock()
			c.releaseConn()
			_ = conn.Close()
			return nil
		}
		c.conns[conn] = struct{}{}
		ic.slot.pend()
		c.connWG.Add(1)
		c.mu.Unlock()
		go c.serveConn(ic, needAuth)
	}
}

func (c *Collector) serveConn(ic *idleConn, needAuth bool) {
	defer c.connWG.Done()
	defer c.releaseConn()
	from := ic.RemoteAddr().String()
	st := c.serve(&stream{c: c, needAuth: needAuth, slot: &ic.slot}, ic, from)
	if ic.slot.evicted.Load() {
		st.Err = ErrEvicted // not the bare "use of closed network connection"
	}
	_ = ic.Close()
	c.mu.Lock()
	delete(c.conns, ic.Conn)
	ic.slot.unpend()
	c.mu.Unlock()
	c.logStream(from, &st)
}

// admitConn takes one of MaxConns slots, or reports there is none.
func (c *Collector) admitConn() bool {
	if c.open.Add(1) > int64(c.cfg.MaxConns) {
		c.open.Add(-1)
		return false
	}
	return true
}

// refuse counts a connection closed at once: MaxConns were open, every
// producer proven.
func (c *Collector) refuse() {
	c.n.refused.Add(1)
	c.inst.errs.Add(context.Background(), 1, c.inst.errAttrs["refused"])
}

func (c *Collector) releaseConn() { c.open.Add(-1) }

// acceptFailed counts a failed accept, logs it at most once a second, and
// returns the next backoff.
func (c *Collector) acceptFailed(err error, backoff time.Duration) time.Duration {
	c.n.acceptErrs.Add(1)
	c.inst.errs.Add(context.Background(), 1, c.inst.errAttrs["accept"])
	backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
	now := time.Now().UnixNano()
	if last := c.lastLog.Load(); now-last >= int64(time.Second) && c.lastLog.CompareAndSwap(last, now) {
		c.log.Warn("accept failed; retrying", "err", err, "retry_in", backoff, "accept_errors", c.n.acceptErrs.Load())
	}
	return backoff
}

// pause waits d, or returns false at once when done is closed (the
// collector's shutdown, a listener's Close).
func pause(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// idleConn closes a connection that delivers nothing for IdleTimeout: each
// read pushes the deadline on. A stream that must present the token has
// until helloBy to do so (HelloTimeout). Once Close drains, the drain's
// deadline holds.
type idleConn struct {
	net.Conn
	slot    slot
	helloBy int64 // Unix ns; 0: no bound
}

func (c *Collector) newIdleConn(conn net.Conn, needAuth bool) *idleConn {
	ic := &idleConn{Conn: conn, slot: slot{c: c, conn: conn}}
	if needAuth && c.cfg.HelloTimeout > 0 {
		ic.helloBy = time.Now().Add(c.cfg.HelloTimeout).UnixNano()
	}
	return ic
}

func (ic *idleConn) Read(p []byte) (int, error) {
	c := ic.slot.c
	var at int64 // Unix ns of the read deadline; 0: none
	if d := c.cfg.IdleTimeout; d > 0 {
		at = time.Now().Add(d).UnixNano()
	}
	if ic.helloBy != 0 && !ic.slot.proven.Load() {
		at = earliest(at, ic.helloBy)
	}
	if drain := c.drainAt.Load(); drain != 0 {
		at = earliest(at, drain)
	}
	// A connection that had a HELLO bound must have it lifted once proven,
	// even when nothing else bounds it.
	if at != 0 || ic.helloBy != 0 {
		var t time.Time
		if at != 0 {
			t = time.Unix(0, at)
		}
		_ = ic.SetReadDeadline(t)
	}
	return ic.Conn.Read(p)
}

// earliest is the earlier of two Unix ns deadlines, 0 meaning none.
func earliest(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

func (c *Collector) getReader(r io.Reader) *bufio.Reader {
	if br, ok := c.readers.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, c.bufSize)
}

func (c *Collector) putReader(br *bufio.Reader) {
	br.Reset(nil)
	c.readers.Put(br)
}

func (c *Collector) logStream(from string, st *StreamStats) {
	ok, suppressed := c.logs.allow(time.Now())
	if !ok {
		return
	}
	attrs := []any{"from", from, "producer", st.Producer, "encoding", st.Encoding, "updates", st.Updates}
	if suppressed > 0 {
		attrs = append(attrs, "lines_suppressed", suppressed)
	}
	bad := st.Dropped + st.Malformed + st.Truncated + st.Oversized + st.Garbage + st.NoAnchor + st.Unauthorized + st.TimedOut
	if bad > 0 || st.Err != nil {
		attrs = append(attrs, "dropped", st.Dropped, "malformed", st.Malformed, "truncated", st.Truncated,
			"oversized", st.Oversized, "garbage", st.Garbage, "no_anchor", st.NoAnchor,
			"unauthorized", st.Unauthorized, "timed_out", st.TimedOut)
		if st.Err != nil {
			attrs = append(attrs, "err", st.Err)
		}
		c.log.Warn("stream ended with losses", attrs...)
		return
	}
	c.log.Info("stream ended", attrs...)
}

func (c *Collector) isShutdown() bool {
	select {
	case <-c.shutdown:
		return true
	default:
		return false
	}
}

// Handler serves POST /v1/updates (a body is one stream, JSON lines or
// binary) and GET /healthz.
func (c *Collector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/updates", c.serveUpdates)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if c.isShutdown() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// serveUpdates answers 202 with the body's StreamStats as JSON; 413 when the
// body exceeds MaxBody (what came before the limit is recorded), 401 when
// the token is required and missing or wrong, 408 when the body stalled
// past the server's ReadTimeout (what came before is recorded; only an
// HTTP/2 stream hears it, as HTTP/1.1's read deadline cuts the whole
// connection), 400 for a body that is neither encoding or a gzip body cut
// short or corrupt (what came before the damage is recorded), 415 for a
// Content-Encoding other than gzip, 405 for anything but POST. A gzip body
// (Content-Encoding: gzip) is decompressed, and MaxBody bounds it
// decompressed.
func (c *Collector) serveUpdates(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST JSON lines or binary frames", http.StatusMethodNotAllowed)
		return
	}
	needAuth := c.cfg.Token != ""
	sl, _ := r.Context().Value(slotKey{}).(*slot) // set by a Server's HTTP server
	if tok, ok := bearer(r); ok && needAuth {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(c.cfg.Token)) != 1 {
			c.n.unauthorized.Add(1)
			c.inst.errs.Add(context.Background(), 1, c.inst.errAttrs["unauthorized"])
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmtrace"`)
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		needAuth = false
		sl.prove() // the token itself: the connection is proven before its body
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, c.cfg.MaxBody)
	gzipped := isGzip(r)
	if gzipped {
		// Decompressed, the body is bounded as a plain one is.
		body = &inflatedLimit{r: gunzip.NewReader(body), left: c.cfg.MaxBody, limit: c.cfg.MaxBody}
	}
	st := c.serve(&stream{c: c, needAuth: needAuth, http: true, slot: sl}, body, "http "+r.RemoteAddr)
	code := http.StatusAccepted
	var (
		mbe *http.MaxBytesError
		gze *gunzip.Error
	)
	switch {
	case st.Unauthorized > 0:
		w.Header().Set("WWW-Authenticate", `Bearer realm="llmtrace"`)
		code = http.StatusUnauthorized
	case errors.As(st.Err, &mbe):
		code = http.StatusRequestEntityTooLarge
	case st.TimedOut > 0:
		code = http.StatusRequestTimeout
	case errors.As(st.Err, &gze):
		// What came before the damage is recorded.
		code = http.StatusBadRequest
	case st.Garbage > 0 && !gzipped && contentCoded(r):
		// A coding the endpoint does not read (deflate, br, zstd), read
		// as it came: its producer is told which it takes (RFC 9110
		// §15.5.16), not that its data is garbage.
		w.Header().Set("Accept-Encoding", "gzip, identity")
		code = http.StatusUnsupportedMediaType
	case st.Garbage > 0:
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The error that ended the body, said (StreamStats.Err is not JSON).
	resp := struct {
		*StreamStats
		Error string `json:"error,omitempty"`
	}{StreamStats: &st}
	if st.Err != nil {
		resp.Error = st.Err.Error()
	}
	_ = json.NewEncoder(w).Encode(&resp)
}

// isGzip reports whether r's body is gzip-compressed (Content-Encoding
// gzip or x-gzip, alone: a log shipper's or a Python producer's compressed
// post).
func isGzip(r *http.Request) bool {
	vs := r.Header.Values("Content-Encoding")
	if len(vs) != 1 {
		return false
	}
	v := strings.TrimSpace(vs[0])
	return strings.EqualFold(v, "gzip") || strings.EqualFold(v, "x-gzip")
}

// inflatedLimit cuts a decompressed body at limit bytes with the
// *http.MaxBytesError a plain body gets there: a compressed body is
// bounded by what it inflates to, not only by what was sent (32 KiB of
// gzip inflate to 32 MiB).
type inflatedLimit struct {
	r           io.Reader
	left, limit int64
}

func (l *inflatedLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, &http.MaxBytesError{Limit: l.limit}
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// contentCoded reports whether r's body has a content coding other than
// identity.
func contentCoded(r *http.Request) bool {
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return true
			}
		}
	}
	return false
}

// bearer returns the token of an "Authorization: Bearer TOKEN" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// Close stops accepting, lets every connection read for Config.DrainGrace
// what its producer had already written, closes them, records what is
// queued and stops the workers. It returns ctx's error if the queue did not drain in
// time. It does not shut the tracker down.
func (c *Collector) Close(ctx context.Context) error {
	c.mu.Lock()
	select {
	case <-c.shutdown:
		c.mu.Unlock()
		return nil
	default:
	}
	close(c.shutdown)
	for l := range c.listeners {
		_ = l.Close()
	}
	// Let every connection read what its producer already wrote, then end.
	grace := time.Now().Add(c.cfg.DrainGrace)
	c.drainAt.Store(grace.UnixNano())
	for conn := range c.conns {
		_ = conn.SetReadDeadline(grace)
	}
	c.mu.Unlock()
	waited := make(chan struct{})
	go func() {
		c.connWG.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(c.cfg.DrainGrace + time.Second):
		c.mu.Lock()
		for conn := range c.conns {
			_ = conn.Close()
		}
		c.mu.Unlock()
		<-waited
	}

	c.httpSides.close()
	c.qmu.Lock()
	c.closed = true
	for _, q := range c.queues {
		close(q)
	}
	c.qmu.Unlock()
	done := make(chan struct{})
	go func() {
		c.workerWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the collector's counters.
func (c *Collector) Stats() Stats {
	return Stats{
		Streams: c.n.streams.Load(), ActiveStreams: c.n.active.Load(), Hellos: c.n.hellos.Load(),
		Updates: c.n.updates.Load(), Recorded: c.n.recorded.Load(), Rejected: c.n.rejected.Load(),
		Dropped: c.n.dropped.Load(), Malformed: c.n.malformed.Load(), Truncated: c.n.truncated.Load(),
		Oversized: c.n.oversized.Load(), Garbage: c.n.garbage.Load(), NoAnchor: c.n.noAnchor.Load(),
		Refused: c.n.refused.Load(), Unauthorized: c.n.unauthorized.Load(), TimedOut: c.n.timedOut.Load(),
		AcceptErrors: c.n.acceptErrs.Load(), Evicted: c.n.evicted.Load(),
	}
}

// Metric names of the collector's own counters.
const (
	MetricCollectorUpdates = attributes.MetricCollectorUpdates
	MetricCollectorErrors  = attributes.MetricCollectorErrors
	MetricCollectorStreams = attributes.MetricCollectorStreams

	// OutcomeKey says what became of an update: queued or dropped.
	OutcomeKey = attributes.CollectorOutcome
	// ErrorKey names a stream or connection error: malformed, truncated,
	// oversized, garbage, no_anchor, refused (over MaxConns), evicted (a
	// connection not yet proven closed at MaxConns), unauthorized, timeout
	// or accept.
	ErrorKey = attributes.CollectorError
)

type collectorInstruments struct {
	updates, errs metric.Int64Counter
	streams       metric.Int64UpDownCounter
	queued        metric.MeasurementOption
	dropped       metric.MeasurementOption
	errAttrs      map[string]metric.MeasurementOption
}

func (in *collectorInstruments) init(mp metric.MeterProvider) error {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/llmtrace/llmtrace/transport")
	var err error
	if in.updates, err = m.Int64Counter(MetricCollectorUpdates, metric.WithUnit("{update}"),
		metric.WithDescription("Updates decoded from producer streams, by outcome (queued, dropped).")); err != nil {
		return err
	}
	if in.errs, err = m.Int64Counter(MetricCollectorErrors, metric.WithUnit("{error}"),
		metric.WithDescription("Lines, frames and streams the collector could not use, by error.")); err != nil {
		return err
	}
	if in.streams, err = m.Int64UpDownCounter(MetricCollectorStreams, metric.WithUnit("{stream}"),
		metric.WithDescription("Producer streams open now.")); err != nil {
		return err
	}
	in.queued = metric.WithAttributeSet(attribute.NewSet(OutcomeKey.String("queued")))
	in.dropped = metric.WithAttributeSet(attribute.NewSet(OutcomeKey.String("dropped")))
	in.errAttrs = map[string]metric.MeasurementOption{}
	for _, e := range []string{"malformed", "truncated", "oversized", "garbage", "no_anchor", "refused", "evicted", "unauthorized", "timeout", "accept"} {
		in.errAttrs[e] = metric.WithAttributeSet(attribute.NewSet(ErrorKey.String(e)))
	}
	return nil
}
