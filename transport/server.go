package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/internal/httpproto"
)

// Defaults of a Server's HTTP limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultHTTPReadTimeout   = time.Minute
	DefaultHTTPWriteTimeout  = time.Minute
	DefaultHTTPIdleTimeout   = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultDrainTimeout      = 10 * time.Second
)

// ServerConfig configures a Server: where producers connect, and the
// limits of the HTTP server. The Collector's own bounds (queue, connection
// cap, idle timeout, token, body limit) are in Collector.
type ServerConfig struct {
	// Collector configures the collector the server feeds. Its Tracker is
	// required.
	Collector Config
	// Listen are the stream addresses (Unix sockets, TCP).
	Listen []Addr
	// HTTPAddr, when set, serves POST /v1/updates and GET /healthz (and
	// Handlers) on this TCP address.
	HTTPAddr string
	// Handlers are more routes of the HTTP server, such as /metrics.
	Handlers map[string]http.Handler
	// Stdin, when set, is read as one trusted stream named "stdin". When it
	// is the only input, Run returns when it ends.
	Stdin io.Reader
	// AllowRemote lets TCP addresses (Listen and HTTPAddr) be other than
	// loopback. Without it a non-loopback address is refused with
	// ErrNotLoopback: set Collector.Token when producers come from other
	// hosts.
	AllowRemote bool
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// HTTP server's (defaults 10 s, 1 min, 1 min, 2 min); MaxHeaderBytes
	// bounds a request's header (default 64 KiB). The body is bounded by
	// Collector.MaxBody.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// DrainTimeout bounds Run's shutdown: the HTTP server's and the
	// collector's drain (default 10 s).
	DrainTimeout time.Duration
	// Logger gets the listening addresses and serving errors; the
	// Collector's Logger when nil.
	Logger *slog.Logger
}

// Server is a Collector with its listeners and HTTP server: NewServer
// listens, Run serves until its context ends and drains. A Server is run
// once; its methods are safe for concurrent use.
type Server struct {
	cfg       ServerConfig
	col       *Collector
	log       *slog.Logger
	listeners []net.Listener
	httpL     net.Listener
	addrs     []Addr
	httpAddr  net.Addr
	srv       *http.Server
}

// NewServer creates the collector and listens on every address, so a
// taken or refused address fails here, before anything runs. Close the
// server with Run (or, if it is never run, Close).
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Listen) == 0 && cfg.HTTPAddr == "" && cfg.Stdin == nil {
		return nil, errors.New("transport: nothing to serve: no Listen address, HTTPAddr or Stdin")
	}
	setServerDefaults(&cfg)
	col, err := NewCollector(cfg.Collector)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, col: col, log: cfg.Logger}
	if s.log == nil {
		s.log = col.log
	}
	if err := s.listen(); err != nil {
		s.closeListeners()
		_ = col.Close(context.Background())
		return nil, err
	}
	return s, nil
}

func setServerDefaults(cfg *ServerConfig) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&cfg.ReadTimeout, DefaultHTTPReadTimeout)
	def(&cfg.WriteTimeout, DefaultHTTPWriteTimeout)
	def(&cfg.IdleTimeout, DefaultHTTPIdleTimeout)
	def(&cfg.DrainTimeout, DefaultDrainTimeout)
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
}

func (s *Server) listen() error {
	for _, a := range s.cfg.Listen {
		l, err := Listen(a, s.cfg.AllowRemote)
		if err != nil {
			return err
		}
		s.listeners = append(s.listeners, l)
		got := Addr{a.Network, l.Addr().String()}
		s.addrs = append(s.addrs, got)
		s.log.Info("listening", "addr", got.String(), "token", s.col.needsAuth(l.Addr()))
	}
	if s.cfg.HTTPAddr == "" {
		return nil
	}
	l, err := Listen(Addr{"tcp", s.cfg.HTTPAddr}, s.cfg.AllowRemote)
	if err != nil {
		return fmt.Errorf("HTTP address: %w", err)
	}
	s.httpL = newLimitListener(l, s.col)
	s.httpAddr = l.Addr()
	s.log.Info("serving HTTP", "addr", l.Addr().String(), "token", s.col.cfg.Token != "")
	mux := http.NewServeMux()
	mux.Handle("/", s.col.Handler())
	for p, h := range s.cfg.Handlers {
		mux.Handle(p, h)
	}
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext:       connSlot,
	}
	httpproto.Configure(s.srv)
	return nil
}

// Addrs returns the addresses listened on, with the ports the system chose
// for port 0.
func (s *Server) Addrs() []Addr { return s.addrs }

// HTTPAddr returns the HTTP server's address, or nil.
func (s *Server) HTTPAddr() net.Addr { return s.httpAddr }

// Collector returns the server's collector (for its Stats).
func (s *Server) Collector() *Collector { return s.col }

// Run serves until ctx ends — or, when Stdin is the only input, until
// Stdin ends — then stops listening, lets open connections deliver what
// they sent, records what is queued and returns. It returns the first
// serving error (nil when the context ended). It does not shut the Tracker
// down.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, len(s.listeners)+1)
	var serving sync.WaitGroup
	for _, l := range s.listeners {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := s.col.Serve(l); err != nil {
				errc <- err
			}
		}()
	}
	if s.srv != nil {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := s.srv.Serve(s.httpL); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	stdinDone := make(chan struct{})
	if s.cfg.Stdin != nil {
		go func() {
			defer close(stdinDone)
			st := s.col.ServeStream(s.cfg.Stdin, "stdin")
			s.col.logStream("stdin", &st)
		}()
	}
	var onlyStdin <-chan struct{}
	if len(s.listeners) == 0 && s.srv == nil {
		onlyStdin = stdinDone
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		s.log.Error("serving failed", "err", err)
	case <-onlyStdin:
	}
	s.waitStdin(stdinDone)
	derr := s.drain()
	serving.Wait()
	return errors.Join(err, derr)
}

// waitStdin gives stdin, at shutdown, what Close gives a connection: the
// collector's DrainGrace to deliver what its producer already wrote (a
// pipe's read ends at the grace), before the collector closes its queues —
// what stdin read after that was dropped, when the other inputs ended the
// run.
func (s *Server) waitStdin(done <-chan struct{}) {
	if s.cfg.Stdin == nil {
		return
	}
	grace := s.col.cfg.DrainGrace
	if d, ok := s.cfg.Stdin.(interface{ SetReadDeadline(time.Time) error }); ok {
		_ = d.SetReadDeadline(time.Now().Add(grace))
	}
	t := time.NewTimer(grace + 100*time.Millisecond)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// drain stops the HTTP server and closes the collector within DrainTimeout.
func (s *Server) drain() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	var errs []error
	if s.srv != nil {
		if err := s.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http drain: %w", err))
			_ = s.srv.Close()
		}
	}
	if err := s.col.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("queue not drained: %w", err))
	}
	return errors.Join(errs...)
}

// Close releases what NewServer took when Run is never called.
func (s *Server) Close() error {
	s.closeListeners()
	return s.col.Close(context.Background())
}

func (s *Server) closeListeners() {
	for _, l := range s.listeners {
		_ = l.Close()
	}
	if s.httpL != nil {
		_ = s.httpL.Close()
	}
}

// limitListener holds the HTTP server's connections to the collector's
// MaxConns, shared with its stream listeners. A connection is evictable, as
// a stream's is, until one of its requests proves its producer: the token
// presented (a bearer header or the body's HELLO), or, with none asked, a
// body that delivered a HELLO or an update.
//
// Its accept errors are counted and retried as Collector.Serve's are:
// net/http's Serve retries only the errors it takes for temporary (EMFILE)
// and returns on the rest — EPROTO and the other network errors Linux's
// accept passes on from a peer, ENOBUFS, ENOMEM, EPERM from a firewall
// rule — which ended Run, and the stream listeners with it.
type limitListener struct {
	net.Listener
	c         *Collector
	closed    chan struct{} // closed by Close: a backoff ends at once
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, c *Collector) *limitListener {
	return &limitListener{Listener: l, c: c, closed: make(chan struct{})}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			backoff = l.c.acceptFailed(err, backoff)
			pause(backoff, l.closed) // once closed, the next Accept returns net.ErrClosed
			continue
		}
		backoff = 0
		if l.c.admitConn() || l.c.evictPending() {
			rc := &releaseConn{Conn: conn, slot: slot{c: l.c, conn: conn}}
			l.c.mu.Lock()
			rc.slot.pend()
			l.c.mu.Unlock()
			return rc, nil
		}
		l.c.refuse()
		_ = conn.Close()
	}
}

// releaseConn gives its slot back once, at the first Close.
type releaseConn struct {
	net.Conn
	slot slot
	once sync.Once
}

func (rc *releaseConn) Close() error {
	c := rc.slot.c
	c.mu.Lock()
	rc.slot.unpend()
	c.mu.Unlock()
	rc.once.Do(c.releaseConn)
	return rc.Conn.Close()
}

// slotKey keys a request's context to its connection's slot.
type slotKey struct{}

// connSlot lets serveUpdates prove the connection a request came on.
func connSlot(ctx context.Context, conn net.Conn) context.Context {
	if rc, ok := conn.(*releaseConn); ok {
		return context.WithValue(ctx, slotKey{}, &rc.slot)
	}
	return ctx
}
