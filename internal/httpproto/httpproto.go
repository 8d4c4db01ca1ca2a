// Package httpproto is the protocols llmtrace's plain-TCP servers speak,
// chosen in one place so that the proxy's listener and the collector's
// HTTP listener agree.
package httpproto

import "net/http"

// Cleartext returns HTTP/1.1 beside HTTP/2 over cleartext TCP with prior
// knowledge (h2c: the client opens with HTTP/2's preface, as Envoy and
// gRPC-style upstreams do). Without it net/http serves HTTP/2 only over
// TLS, and an h2c client gets its preface answered as a malformed HTTP/1
// request. The Upgrade: h2c dance of HTTP/1.1 is not served (net/http has
// none); its clients stay on HTTP/1.1.
func Cleartext() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
