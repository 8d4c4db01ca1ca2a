// Package debugsrv serves a process's own runtime figures for the
// binaries' -debug-listen flag: net/http/pprof's profiles under
// /debug/pprof/ and expvar's /debug/vars (memstats: allocations, heap,
// GC), the latter with the process's CPU time and peak RSS (VmHWM on Linux)
// ("process": {"cpu_seconds", "max_rss_bytes"}) where the OS gives them.
// What the overhead study (e2e/overhead) reads, and what an operator
// profiling a proxy or server in place needs.
//
// Off unless asked for; it serves whoever can reach the address, so bind
// it to loopback. Importing it registers the same handlers on
// http.DefaultServeMux (net/http/pprof's and expvar's init): a binary that
// imports it must not serve DefaultServeMux elsewhere, and neither
// llmtrace nor examples/httpserver does.
package debugsrv

import (
	"expvar"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

var publishOnce sync.Once

// Serve listens on addr and serves the debug endpoints until the returned
// stop is called; bound is the address it listens on. The error is the
// listener's.
func Serve(addr string) (bound string, stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	publishOnce.Do(func() { expvar.Publish("process", expvar.Func(processVars)) })
	mux := http.NewServeMux()
	mux.Handle("GET /debug/vars", expvar.Handler())
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l) // ends when stop closes it
	}()
	return l.Addr().String(), func() {
		_ = srv.Close()
		<-done
	}, nil
}
