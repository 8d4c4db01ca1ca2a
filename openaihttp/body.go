package openaihttp

import (
	"io"
	"sync"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// UnknownModel is the model a traced request is recorded under when its
// body names none the layer can read: not JSON, no "model", a model longer
// than 4 KiB, or a model beyond what the layer reads (the middleware's
// MaxBody or budget; in the proxy, a body the upstream answered before it
// was sent whole). The root's llm.http.request_body says which. Give it to
// otelstats.WithModels beside your models so these requests keep a metric
// series of their own instead of joining "other".
const UnknownModel = "unknown"

// Values of llm.http.request_body.
const (
	BodyNotJSON      = "not_json"
	BodyNoModel      = "no_model"
	BodyModelTooLong = "model_too_long"
	BodyUnread       = "unread"
)

// modelOf returns the model to record for what the scanner read and, when
// the body named none, why. eof says the body was read to its end.
func modelOf(s *fieldScanner, ri *requestInfo, eof bool) (model, problem string) {
	switch {
	case ri.Model != "":
		return ri.Model, ""
	case ri.ModelOver:
		return UnknownModel, BodyModelTooLong
	case s.bad || eof && !s.complete():
		if s.vals[reqModel].ok {
			return UnknownModel, BodyNoModel // a model of the wrong type
		}
		return UnknownModel, BodyNotJSON
	case s.complete():
		return UnknownModel, BodyNoModel
	}
	return UnknownModel, BodyUnread
}

// modelKnown reports whether the scanner has settled the model: read it
// whole, or found it over its cap.
func (s *fieldScanner) modelKnown() bool { return s.vals[reqModel].ok || s.vals[reqModel].over }

// readAhead reads a request body's first bytes for its fields: up to the
// peek limit, and on towards the end of the object (at most maxBody, within
// the budget) when the model is not among them. It returns the body the
// handler reads — exactly the original's bytes, then its error or EOF —
// and whether the original was read to its end.
func (c *config) readAhead(body io.ReadCloser, s *fieldScanner, h *hold) (*peekedBody, bool) {
	pb := &peekedBody{rest: body, hold: h}
	if body == nil {
		pb.rest, pb.err = io.NopCloser(nil), io.EOF
		return pb, true
	}
	var buf []byte
	for zeros := 0; zeros < 100; {
		if len(buf) >= c.maxBody || len(buf) >= c.peekLimit && s.modelKnown() || s.complete() {
			break
		}
		if len(buf) == cap(buf) {
			limit := c.peekLimit
			if len(buf) >= c.peekLimit {
				limit = c.maxBody
			}
			var ok bool
			if buf, ok = h.grow(buf, 1, 4096, limit); !ok {
				break
			}
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		s.feed(buf[len(buf) : len(buf)+n])
		buf = buf[:len(buf)+n]
		if err != nil {
			pb.err = err
			break
		}
		if n == 0 {
			zeros++ // a reader that makes no progress: leave it to the handler
		}
	}
	pb.buf, pb.held = buf, cap(buf)
	return pb, pb.err == io.EOF
}

// peekedBody replays the bytes read ahead, then the rest of the original
// body (or the error that stopped the read-ahead), so the handler reads
// exactly what it would have read without the middleware. What it held is
// given back to the budget once the handler has read it.
type peekedBody struct {
	mu   sync.Mutex
	buf  []byte
	held int
	err  error // the read-ahead's error, io.EOF when it read the whole body
	rest io.ReadCloser
	hold *hold
}

func (b *peekedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if len(b.buf) > 0 {
		n := copy(p, b.buf)
		b.buf = b.buf[n:]
		if len(b.buf) == 0 {
			b.buf = nil
			b.hold.release(b.held)
			b.held = 0
		}
		b.mu.Unlock()
		return n, nil
	}
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return b.rest.Read(p)
}

func (b *peekedBody) Close() error { return b.rest.Close() }

// scanBody streams a proxied request body upstream, reading its fields as
// the transport reads it: no byte is held. The transport reads it on a
// goroutine of its own, hence the lock (never held across a Read of the
// client's body). The transport's Close leaves the client's body open: an
// upstream that failed before reading it leaves the rest for drain.
type scanBody struct {
	rest    io.ReadCloser
	mu      sync.Mutex
	s       *fieldScanner
	sv      fieldScanner // what s points to
	eof     bool
	timeout bool      // reading the client's body hit a deadline
	shut    bool      // the transport is done with the body
	end     time.Time // when the body was read to its end (or its object closed)
}

func (b *scanBody) Read(p []byte) (int, error) {
	n, err := b.rest.Read(p)
	b.mu.Lock()
	b.s.feed(p[:n])
	if (err == io.EOF || b.s.complete()) && b.end.IsZero() {
		b.end = time.Now()
	}
	b.eof = b.eof || err == io.EOF
	b.timeout = b.timeout || isTimeout(err)
	b.mu.Unlock()
	return n, err
}

func (b *scanBody) timedOut() bool { return b.sawTimeout() || probeTimeout(b.rest) }

// sawTimeout reports whether a read of the body has hit a deadline,
// without reading (a live request's body may block).
func (b *scanBody) sawTimeout() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.timeout
}

// Close is the transport's: it will read no more.
func (b *scanBody) Close() error {
	b.mu.Lock()
	b.shut = true
	b.mu.Unlock()
	return nil
}

// drain reads on, up to limit bytes, what the transport left unread of a
// body whose object has not closed, so that the request's model is known
// all the same: after an upstream failure (RoundTrip returned an error; a
// dial error never touched the body) or the transport's Close.
func (b *scanBody) drain(limit int, failed bool) {
	b.mu.Lock()
	ok := (b.shut || failed) && !b.eof && !b.s.complete() && !b.s.bad
	b.mu.Unlock()
	if !ok {
		return
	}
	buf := make([]byte, 32<<10)
	for read := 0; read < limit; {
		n, err := b.rest.Read(buf[:min(len(buf), limit-read)])
		read += n
		b.mu.Lock()
		b.s.feed(buf[:n])
		done := b.s.complete() || b.s.bad
		if (err == io.EOF || b.s.complete()) && b.end.IsZero() {
			b.end = time.Now()
		}
		b.eof = b.eof || err == io.EOF
		b.mu.Unlock()
		if err != nil || done {
			return
		}
	}
}

// result returns what the body said so far, and when it was read; the
// prompt, when the scanner kept it, and whether it is only its head.
func (b *scanBody) result() (ri requestInfo, model, problem string, end time.Time, input []otelstats.Message, inputCut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ri = requestInfoOf(b.s)
	model, problem = modelOf(b.s, &ri, b.eof)
	input, inputCut = captureInputOf(b.s)
	b.s.release()
	return ri, model, problem, b.end, input, inputCut
}
