package openaihttp

import (
	"net/http"
	"time"
)

// respWriter passes everything to the client first, unchanged, then shows
// the exchange what was written. http.Flusher is always implemented
// (through http.ResponseController, a no-op when the writer underneath
// cannot flush, as in otelhttp) and Unwrap gives http.ResponseController
// the writer underneath (deadlines, Hijack, full duplex).
type respWriter struct {
	http.ResponseWriter
	ex *exchange
	// before, when set, runs once before the first header goes out (the
	// proxy records ARRIVED there).
	before func(code int)
	headed bool // a final status has been seen
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
	if w.before != nil {
		w.before(code)
	}
	w.ex.header(code, w.Header(), time.Now())
}

func (w *respWriter) WriteHeader(code int) {
	w.header(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(p []byte) (int, error) {
	w.header(http.StatusOK)
	n, err := w.ResponseWriter.Write(p)
	w.ex.wrote(time.Now(), p[:n], err)
	return n, err
}

// Flush flushes the client's connection, through http.ResponseController
// so that wrappers between us and the connection are honoured.
func (w *respWriter) Flush() {
	w.header(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
