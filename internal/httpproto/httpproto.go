// Package httpproto is the protocols llmtrace's plain-TCP servers speak,
// chosen in one place so that the proxy's listener and the collector's
// HTTP listener agree.
package httpproto

import "net/http"

// Configure makes srv speak HTTP/1.1 beside HTTP/2 over cleartext TCP with
// prior knowledge (h2c: the client opens with HTTP/2's preface, as Envoy
// and gRPC-style upstreams do), one HTTP/2 stream at a time per connection.
//
// Without the protocols, net/http serves HTTP/2 only over TLS, and an h2c
// client gets its preface answered as a malformed HTTP/1 request. The
// Upgrade: h2c dance of HTTP/1.1 is not served (net/http has none); its
// clients stay on HTTP/1.1.
//
// One stream: every bound of those servers is per connection (the
// connection caps, -max-conns, a body's line and memory bounds), and
// net/http's default of 250 concurrent streams would multiply each of them
// by 250 — a cap of 1,024 producer connections would admit 256,000 bodies
// at once. With one, an HTTP/2 connection costs what an HTTP/1.1 one does;
// a client with more requests at once opens more connections, as Go's and
// Envoy's HTTP/2 clients do when the server's SETTINGS say so.
func Configure(srv *http.Server) {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1}
}
