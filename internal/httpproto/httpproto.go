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
//
// Memory: net/http lets an HTTP/2 client send 1 MiB of a body ahead of
// the handler's reads, on the stream and on the connection, in frames of
// up to 1 MiB whose read buffer the connection keeps for its life: about
// 2 MiB a connection a client can pin, 8 GiB at the proxy's cap of 4,096.
// The windows are HTTP/2's own 64 KiB and frames its 16 KiB minimum, so
// that a client can pin some 80 KiB a connection, not MiB (a body's
// upload is then paced by the handler's reads, as over HTTP/1.1).
func Configure(srv *http.Server) {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Protocols = &p
	srv.HTTP2 = &http.HTTP2Config{
		MaxConcurrentStreams:          1,
		MaxReadFrameSize:              maxFrame,
		MaxReceiveBufferPerStream:     maxWindow,
		MaxReceiveBufferPerConnection: maxWindow,
	}
}

// Bounds of what an HTTP/2 client may send ahead (see Configure).
const (
	maxFrame  = 16 << 10 // HTTP/2's least SETTINGS_MAX_FRAME_SIZE
	maxWindow = 64 << 10 // about HTTP/2's initial window, 65,535
)
