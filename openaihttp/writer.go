package openaihttp

import (
	"net/http"
	"time"
)

// respWriter passes everything to the client first, unchanged, then shows
// the exchange what was written. http.Flusher is always implemented
// (through http.ResponseController, a no-op when the writer underneath
// cannot flush, as in otelhttp) and Unwrap gives http.ResponseController
// the writer underneath (deadlines, Hijack, full duplex); CloseNotify is
// kept for gin.
type respWriter struct {
	http.ResponseWriter
	ex *exchange
	// call, in the proxy, records ARRIVED before the first header goes
	// out.
	call *call
	// flushEach flushes every write before the exchange reads it: the
	// proxy's ReverseProxy flushes after each write anyway, and this way
	// the client is not kept waiting while the layer reads the bytes.
	flushEach bool
	flushed   bool // with flushEach: nothing written since the last flush
	headed    bool // a final status has been seen
}

var (
	_ http.ResponseWriter = (*respWriter)(nil)
	_ http.Flusher        = (*respWriter)(nil)
)

func (w *respWriter) header(code int) {
	if w.headed || code < 200 {
		return
	}
	w.headed = true
	if w.call != nil {
		w.call.arrive()
	}
	w.ex.header(code, w.Header(), time.Now())
}

func (w *respWriter) WriteHeader(code int) {
	w.header(code)
	w.flushed = false
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(p []byte) (int, error) {
	w.header(http.StatusOK)
	began := time.Now()
	n, err := w.ResponseWriter.Write(p)
	w.flushed = false
	if w.flushEach && err == nil {
		w.flushed = http.NewResponseController(w.ResponseWriter).Flush() == nil
	}
	w.ex.wrote(began, time.Now(), p[:n], err)
	return n, err
}

// Flush flushes the client's connection, through http.ResponseController
// so that wrappers between us and the connection are honoured.
func (w *respWriter) Flush() {
	w.header(http.StatusOK)
	if w.flushed {
		return // Write flushed, and nothing was written since
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.flushed = w.flushEach && err == nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// closeNotifier is http.CloseNotifier, named without the deprecated type.
type closeNotifier interface{ CloseNotify() <-chan bool }

// CloseNotify keeps http.CloseNotifier: deprecated, but gin's
// Context.Stream (Ollama's server streams with it) asserts it and panics
// on a writer without it. A writer underneath without it gives a channel
// that never fires: its request's context still says the client left.
func (w *respWriter) CloseNotify() <-chan bool {
	if cn, ok := w.ResponseWriter.(closeNotifier); ok {
		return cn.CloseNotify()
	}
	return nil
}
