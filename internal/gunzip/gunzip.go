// Package gunzip reads gzip-compressed input for llmtrace's readers of
// updates: `llmtrace replay` (by content: Maybe) and the collector's HTTP
// endpoint (by Content-Encoding: NewReader). Decompression streams, and a
// truncated or corrupt input is a typed *Error after everything before it.
package gunzip

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
)

// Magic opens every gzip member (RFC 1952). Maybe detects by content,
// not by a ".gz" name, so a compressed log piped to stdin is read as well
// as a rotated foo.log.gz; an update log is JSON text and never opens with
// 0x1f.
var Magic = [2]byte{0x1f, 0x8b}

// Error is a gzip-compressed input that cannot be decompressed
// further: truncated, corrupt (a bad checksum, bad deflate data), or
// followed by bytes that are no gzip member. Offset is how many
// decompressed bytes were read before it, all of them delivered.
type Error struct {
	Offset int64
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("gzip-compressed input truncated or corrupt after %d decompressed bytes: %v", e.Offset, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Maybe returns in's content: decompressed when in opens with gzip's
// magic bytes, else as it is. It reads nothing but in's first two bytes
// before its first Read, so an input that is not compressed reads exactly
// as before. Every member of a concatenated gzip (`cat a.gz b.gz`) is read,
// as gzip(1) does. Decompression streams: memory does not grow with the
// decompressed size, so the caller's line bound also bounds a gzip bomb.
func Maybe(in io.Reader) io.Reader {
	br := bufio.NewReaderSize(in, 64<<10)
	if b, _ := br.Peek(2); len(b) < 2 || b[0] != Magic[0] || b[1] != Magic[1] {
		// A Peek error (an empty input, an interrupt) is the first Read's.
		return br
	}
	return NewReader(br)
}

// NewReader decompresses in, a gzip stream (every member of a concatenated
// one). It reads nothing of in before its first Read.
func NewReader(in io.Reader) io.Reader { return &gunzipReader{src: &errMemo{r: in}} }

// errMemo remembers the last error its reader returned but EOF, so that a
// failure of the input itself (an interrupt, an I/O error) is told apart
// from the gzip stream being bad: compress/gzip passes the former on as it
// came, and it must not be reported as corruption.
type errMemo struct {
	r   io.Reader
	err error
}

func (m *errMemo) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err != nil && err != io.EOF {
		m.err = err
	}
	return n, err
}

// gunzipReader decompresses src, making the gzip.Reader at the first Read
// so that a bad first header is an error of reading, reported like the
// rest, after the run was set up.
type gunzipReader struct {
	src *errMemo
	z   *gzip.Reader
	n   int64 // decompressed bytes delivered
	err error
}

func (g *gunzipReader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.z == nil {
		z, err := gzip.NewReader(g.src) // multistream by default
		if err != nil {
			g.err = g.wrap(err)
			return 0, g.err
		}
		g.z = z
	}
	n, err := g.z.Read(p)
	g.n += int64(n)
	if err != nil {
		g.err = g.wrap(err)
	}
	return n, g.err
}

// wrap makes err an *Error unless it is the end of the input or the
// input's own failure.
func (g *gunzipReader) wrap(err error) error {
	if err == io.EOF || g.src.err != nil {
		return err
	}
	return &Error{Offset: g.n, Err: err}
}
