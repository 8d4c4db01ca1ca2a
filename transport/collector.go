package transport

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Defaults of the Collector's bounds.
const (
	DefaultQueueSize = 1 << 16
	DefaultWorkers   = 2
	DefaultMaxLine   = 64 << 10
	DefaultMaxBody   = 32 << 20
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
	// AlignClocks maps each stream onto the collector's wall clock: the
	// difference between the collector's clock when a HELLO arrives and the
	// HELLO's wall time is added to every time of the stream. Use it for
	// producers on the same host (Unix socket, loopback, stdin), where a
	// HELLO arrives within microseconds, so a producer whose wall clock is
	// off still lines up with the others. The alignment is as precise as
	// the HELLO's delivery (the Producer sends it the moment it connects);
	// it never moves within a stream, so a side's times keep their order.
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
	Recorded      int64 // accepted by the tracker
	Rejected      int64 // rejected at decoding or by the tracker
	Dropped       int64 // found the queue full (or the collector closed)
	Malformed     int64 // lines or frames that did not decode
	Truncated     int64 // streams that ended inside a line or frame
	Oversized     int64 // lines or frames above the limit
	Garbage       int64 // streams that began with neither a header nor JSON
	NoAnchor      int64 // monotonic times before any HELLO
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
	seed   maphash.Seed
	queues []chan otelstats.Update

	qmu    sync.RWMutex // held for reading while enqueueing; closed under the write lock
	closed bool

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	connWG    sync.WaitGroup
	workerWG  sync.WaitGroup
	shutdown  chan struct{}

	n struct {
		streams, active, hellos, updates, recorded, rejected, dropped atomic.Int64
		malformed, truncated, oversized, garbage, noAnchor            atomic.Int64
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
	}
	if err := c.inst.init(cfg.MeterProvider); err != nil {
		return nil, err
	}
	per := max(cfg.QueueSize/cfg.Workers, 1)
	c.queues = make([]chan otelstats.Update, cfg.Workers)
	for i := range c.queues {
		q := make(chan otelstats.Update, per)
		c.queues[i] = q
		c.workerWG.Add(1)
		go c.work(q)
	}
	return c, nil
}

func (c *Collector) work(q chan otelstats.Update) {
	defer c.workerWG.Done()
	for u := range q {
		if err := c.tr.Record(u); err != nil {
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
	case q <- *u:
		return true
	default:
		return false
	}
}

// Serve accepts connections on l until l fails or the collector is closed,
// reading each as a stream. It returns nil after Close.
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
	backoff := 5 * time.Millisecond
	for {
		conn, err := l.Accept()
		if err != nil {
			if c.isShutdown() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return err
		}
		backoff = 5 * time.Millisecond
		c.mu.Lock()
		if c.isShutdown() {
			c.mu.Unlock()
			_ = conn.Close()
			return nil
		}
		c.conns[conn] = struct{}{}
		c.connWG.Add(1)
		c.mu.Unlock()
		go func() {
			defer c.connWG.Done()
			st := c.ServeStream(conn, conn.RemoteAddr().String())
			_ = conn.Close()
			c.mu.Lock()
			delete(c.conns, conn)
			c.mu.Unlock()
			c.logStream(conn.RemoteAddr().String(), &st)
		}()
	}
}

func (c *Collector) logStream(from string, st *StreamStats) {
	attrs := []any{"from", from, "producer", st.Producer, "encoding", st.Encoding, "updates", st.Updates}
	bad := st.Dropped + st.Malformed + st.Truncated + st.Oversized + st.Garbage + st.NoAnchor
	if bad > 0 || st.Err != nil {
		attrs = append(attrs, "dropped", st.Dropped, "malformed", st.Malformed, "truncated", st.Truncated,
			"oversized", st.Oversized, "garbage", st.Garbage, "no_anchor", st.NoAnchor)
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
// body exceeds MaxBody (what came before the limit is recorded), 405 for
// anything but POST.
func (c *Collector) serveUpdates(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST JSON lines or binary frames", http.StatusMethodNotAllowed)
		return
	}
	body := http.MaxBytesReader(w, r.Body, c.cfg.MaxBody)
	st := c.ServeStream(body, "http "+r.RemoteAddr)
	code := http.StatusAccepted
	var mbe *http.MaxBytesError
	switch {
	case errors.As(st.Err, &mbe):
		code = http.StatusRequestEntityTooLarge
	case st.Garbage > 0:
		code = http.StatusBadRequest
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&st)
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
	}
}

// Metric names of the collector's own counters.
const (
	MetricCollectorUpdates = attributes.MetricCollectorUpdates
	MetricCollectorErrors  = attributes.MetricCollectorErrors
	MetricCollectorStreams = attributes.MetricCollectorStreams

	// OutcomeKey says what became of an update: queued or dropped.
	OutcomeKey = attributes.CollectorOutcome
	// ErrorKey names a stream error: malformed, truncated, oversized,
	// garbage or no_anchor.
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
	for _, e := range []string{"malformed", "truncated", "oversized", "garbage", "no_anchor"} {
		in.errAttrs[e] = metric.WithAttributeSet(attribute.NewSet(ErrorKey.String(e)))
	}
	return nil
}
