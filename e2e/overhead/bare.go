package overhead

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/llmtrace/llmtrace/examples/httpserver/toyserver"
	"github.com/llmtrace/llmtrace/internal/debugsrv"
	"github.com/llmtrace/llmtrace/openaihttp"
)

// The baseline's processes — the toy engine untraced, and
// httputil.ReverseProxy in front of it — run as the test binary itself,
// told what to be by the environment.
const (
	EnvRole       = "LLMTRACE_OVERHEAD_ROLE" // "bare-server" or "bare-proxy"
	EnvListen     = "LLMTRACE_OVERHEAD_LISTEN"
	EnvDebug      = "LLMTRACE_OVERHEAD_DEBUG"
	EnvUpstream   = "LLMTRACE_OVERHEAD_UPSTREAM"    // bare-proxy
	EnvSlots      = "LLMTRACE_OVERHEAD_SLOTS"       // bare-server
	EnvTokenDelay = "LLMTRACE_OVERHEAD_TOKEN_DELAY" // bare-server
)

// RunBare runs the role the environment names until SIGTERM and reports
// whether it did (false: no role asked for).
func RunBare() (code int, ran bool) {
	role := os.Getenv(EnvRole)
	if role == "" {
		return 0, false
	}
	if err := runBare(role); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		return 1, true
	}
	return 0, true
}

func runBare(role string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	_, stopDebug, err := debugsrv.Serve(os.Getenv(EnvDebug))
	if err != nil {
		return err
	}
	defer stopDebug()
	var h http.Handler
	switch role {
	case "bare-server":
		slots, _ := strconv.Atoi(os.Getenv(EnvSlots))
		delay, _ := time.ParseDuration(os.Getenv(EnvTokenDelay))
		mux := http.NewServeMux()
		mux.Handle("/v1/", toyserver.New(toyserver.Config{Models: []string{"toy"}, Slots: slots, TokenDelay: delay}))
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
		h = mux
	case "bare-proxy":
		up, err := url.Parse(os.Getenv(EnvUpstream))
		if err != nil {
			return err
		}
		rp := httputil.NewSingleHostReverseProxy(up)
		rp.FlushInterval = -1
		rp.Transport = openaihttp.NewTransport(openaihttp.TransportConfig{})
		// As openaihttp's proxy: without full duplex an HTTP/1 server
		// closes the request body under the transport once the response
		// begins, and about one stream in a hundred is cut short.
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		})
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	srv := &http.Server{Addr: os.Getenv(EnvListen), Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
