package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
)

// gzipMagic opens every gzip member (RFC 1952). Detection goes by content,
// not by a ".gz" name, so a compressed log piped to stdin is read as well
// as a rotated foo.log.gz; an update log is JSON text and never opens with
// 0x1f.
var gzipMagic = [2]byte{0x1f, 0x8b}

// gzipError is a gzip-compressed input that cannot be decompressed
// further: truncated, corrupt (a bad checksum, bad deflate data), or
// followed by bytes that are no gzip member. Offset is how many
// decompressed bytes were read before it, all of them delivered.
type gzipError struct {
	Offset int64
	Err    error
}

func (e *gzipError) Error() string {
	return fmt.Sprintf("gzip-compressed input truncated or corrupt after %d decompressed bytes: %v", e.Offset, e.Err)
}

func (e *gzipError) Unwrap() error { return e.Err }

// maybeGunzip returns in's content: decompressed when in opens with gzip's
// magic bytes, else as it is. It reads nothing but in's first two bytes
// before its first Read, so an input that is not compressed reads exactly
// as before. Every member of a concatenated gzip (`cat a.gz b.gz`) is read,
// as gzip(1) does. Decompression streams: memory does not grow with the
// decompressed size, so the caller's line bound also bounds a gzip bomb.
func maybeGunzip(in io.Reader) io.Reader {
	br := bufio.NewReaderSize(in, 64<<10)
	if b, _ := br.Peek(2); len(b) < 2 || b[0] != gzipMagic[0] || b[1] != gzipMagic[1] {
		// A Peek error (an empty input, an interrupt) is the first Read's.
		return br
	}
	src := &errMemo{r: br}
	return &gunzipReader{src: src}
}

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

// wrap makes err a *gzipError unless it is the end of the input or the
// input's own failure.
func (g *gunzipReader) wrap(err error) error {
	if err == io.EOF || g.src.err != nil {
		return err
	}
	return &gzipError{Offset: g.n, Err: err}
}
