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
// A body cut short is read as far as it goes.
func (z *compressed) inflate(s *fieldScanner) bool {
	if z.over {
		return false
	}
	var r io.Reader
	var err error
	src := bytes.NewReader(z.buf)
	switch z.coding {
	case codingGzip:
		r, err = gzip.NewReader(src)
	case codingDeflate:
		// HTTP's deflate is zlib's format; some servers send it raw.
		if r, err = zlib.NewReader(src); err != nil {
			r, err = flate.NewReader(bytes.NewReader(z.buf)), nil
		}
	}
	if err != nil {
		return false
	}
	var chunk [8 << 10]byte
	for read := 0; read < maxInflated; {
		n, err := r.Read(chunk[:])
		s.feed(chunk[:n])
		read += n
		if err != nil {
			return err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || read > 0
		}
	}
	return true
}

// release gives back what was set aside.
func (z *compressed) release(h *hold) {
	h.release(cap(z.buf))
	z.buf = nil
}
