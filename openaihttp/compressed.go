package openaihttp

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"
)

// Content codings of a response in one piece that the layer reads: the
// compressed bytes are set aside as they go by (up to WithEventLimit,
// within the budget) and read at the end. Brotli and zstd, which the
// standard library lacks, pass unread.
const (
	codingNone uint8 = iota
	codingGzip
	codingDeflate
)

func codingOf(ce string) (coding uint8, ok bool) {
	switch {
	case ce == "" || strings.EqualFold(ce, "identity"):
		return codingNone, true
	case strings.EqualFold(ce, "gzip") || strings.EqualFold(ce, "x-gzip"):
		return codingGzip, true
	case strings.EqualFold(ce, "deflate"):
		return codingDeflate, true
	}
	return codingNone, false
}

// maxInflated bounds what the layer decompresses of one response: a body
// that inflates past it (a compression bomb) is read no further.
const maxInflated = 64 << 20

// compressed is a compressed response body set aside.
type compressed struct {
	coding uint8
	buf    []byte
	over   bool // longer than the layer keeps: unread
}

// add sets p aside, within limit bytes charged to h.
func (z *compressed) add(p []byte, limit int, h *hold) {
	if z.over {
		return
	}
	if len(z.buf)+len(p) > limit {
		z.drop(h)
		return
	}
	var ok bool
	if z.buf, ok = h.grow(z.buf, len(p), 4096, limit); !ok {
		z.drop(h)
		return
	}
	z.buf = append(z.buf, p...)
}

func (z *compressed) drop(h *hold) {
	z.over = true
	h.release(cap(z.buf))
	z.buf = nil
}

// inflate feeds the decompressed body to s, and reports whether it was
// read: false when it was set aside in part only, or is not in its coding.
// A body cut short is read as far as it goes; one whose object has ended
// (or that the scanner gave up on) is inflated no further: a few KiB of
// gzip after the object can hold the rest of maxInflated, some 25 ms of
// CPU a response for nothing the scanner would read.
func (z *compressed) inflate(s *fieldScanner) bool {
	return z.inflateFrom(bytes.NewReader(z.buf), s)
}

// inflateFrom is inflate reading z's bytes from src (a reader of z.buf),
// which it leaves where it stopped.
func (z *compressed) inflateFrom(src *bytes.Reader, s *fieldScanner) bool {
	if z.over {
		return false
	}
	var r io.Reader
	var err error
	switch z.coding {
	case codingGzip:
		r, err = gzip.NewReader(src)
	case codingDeflate:
		// HTTP's deflate is zlib's format; some servers send it raw.
		if r, err = zlib.NewReader(src); err != nil {
			src.Reset(z.buf)
			r, err = flate.NewReader(src), nil
		}
	}
	if err != nil {
		return false
	}
	var chunk [8 << 10]byte
	for n := 0; n < maxInflated && !s.finished(); {
		m, err := r.Read(chunk[:])
		s.feed(chunk[:m])
		n += m
		if err != nil {
			return err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || n > 0
		}
	}
	return true
}

// release gives back what was set aside.
func (z *compressed) release(h *hold) {
	h.release(cap(z.buf))
	z.buf = nil
}
