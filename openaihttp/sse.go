package openaihttp

import "bytes"

// sseSink receives the events an sseReader completes. data is valid only
// during the call; over says the event was longer than the reader keeps
// (its data is then incomplete and must not be parsed).
type sseSink interface {
	event(data []byte, over bool)
}

// sseReader splits a text/event-stream into events as its bytes arrive, in
// whatever pieces they arrive: lines end at CRLF, LF or CR, as the SSE
// specification says; data lines are joined with LF; comments (keep-alives)
// and the event, id and retry fields are skipped, but for a failure they
// tell (failed). The usual event — one
// data line and its blank line within one write — is handed over in place,
// without a copy; anything else is assembled in a buffer of at most limit
// bytes (charged to hold), past which the event is reported over. The zero
// value needs only limit. Not safe for concurrent use.
type sseReader struct {
	limit int
	hold  *hold

	line     []byte // a line split across writes
	lineOver bool
	lastCR   bool // the last write ended with CR: a LF next belongs to it
	bomAt    int  // bytes of a leading byte order mark read; len(bom) once past it

	data     []byte // the event's data lines, joined
	hasData  bool
	dataOver bool
	pend     []byte // the event's only data line, still in the caller's bytes
	hasPend  bool
	// failed: a line said the stream failed without a data line saying
	// it: an "error" field (llama.cpp's server wrote its errors as
	// `error: {...}`, then [DONE]) or the event type error.
	failed bool
	// ended: the sink read the stream's last event ([DONE]). The OpenAI
	// SDKs read no further, so neither does the reader: content or an
	// error a broken upstream sends after it never reaches the caller.
	ended bool
}

// end stops the reader: what follows is not read.
func (s *sseReader) end() { s.ended = true }

// feed reads p, calling sink for every event it completes.
func (s *sseReader) feed(p []byte, sink sseSink) {
	if s.bomAt < len(bom) {
		p = s.skipBOM(p)
	}
	for len(p) > 0 && !s.ended {
		if s.lastCR {
			s.lastCR = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			s.appendLine(p)
			break
		}
		if len(s.line) > 0 || s.lineOver {
			s.appendLine(p[:i])
			s.endLine(s.line, s.lineOver, false, sink)
			s.line, s.lineOver = s.line[:0], false
		} else {
			s.endLine(p[:i], i > s.limit, true, sink)
		}
		s.lastCR = p[i] == '\r'
		p = p[i+1:]
	}
	if s.hasPend {
		// p is the caller's and will be reused: keep a copy.
		s.hasPend = false
		s.appendData(s.pend)
		s.pend = nil
	}
}

// lineEnd is the index of the first CR or LF in p, or -1.
func lineEnd(p []byte) int {
	i := bytes.IndexByte(p, '\n')
	head := p
	if i >= 0 {
		head = p[:i]
	}
	if j := bytes.IndexByte(head, '\r'); j >= 0 {
		return j
	}
	return i
}

// bom is the UTF-8 byte order mark, which the SSE specification's decoder
// strips from a stream's start: left in, it made the first line's field
// name "\ufeffdata", and the first event (often the first token) was lost.
const bom = "\xef\xbb\xbf"

// skipBOM drops a byte order mark the stream starts with, also one split
// across writes; bytes that only began like one are the first line's.
func (s *sseReader) skipBOM(p []byte) []byte {
	for ; s.bomAt < len(bom) && len(p) > 0; p = p[1:] {
		if p[0] != bom[s.bomAt] {
			if s.bomAt > 0 {
				s.appendLine([]byte(bom[:s.bomAt]))
			}
			s.bomAt = len(bom)
			return p
		}
		s.bomAt++
	}
	return p
}

func (s *sseReader) appendLine(b []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(b) > s.limit || !s.grow(&s.line, len(b)) {
		s.lineOver = true
		s.hold.release(cap(s.line))
		s.line = nil
		return
	}
	s.line = append(s.line, b...)
}

// grow makes room for n more bytes in *b, charged to the hold.
func (s *sseReader) grow(b *[]byte, n int) bool {
	var ok bool
	*b, ok = s.hold.grow(*b, n, 256, s.limit+1)
	return ok
}

// endLine handles one complete line; inPlace says it lies in the caller's
// bytes (which stay valid until feed returns).
func (s *sseReader) endLine(line []byte, over, inPlace bool, sink sseSink) {
	switch {
	case over:
		s.dataOver, s.hasData = true, true // a line too long spoils its event
		return
	case len(line) == 0:
		s.dispatch(sink)
		return
	case line[0] == ':': // a comment: keep-alive
		return
	}
	field, value, _ := bytes.Cut(line, []byte{':'})
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(field) {
	case "data":
	case "error":
		s.failed = true
		return
	case "event":
		s.failed = s.failed || string(value) == "error"
		return
	default:
		return // id, retry: the data says all we need
	}
	if inPlace && !s.hasData && !s.hasPend {
		s.pend, s.hasPend = value, true
		return
	}
	if s.hasPend {
		s.hasPend = false
		s.appendData(s.pend)
		s.pend = nil
	}
	if s.hasData {
		s.appendData([]byte{'\n'})
	}
	s.appendData(value)
}

func (s *sseReader) appendData(b []byte) {
	s.hasData = true
	if s.dataOver {
		return
	}
	if len(s.data)+len(b) > s.limit || !s.grow(&s.data, len(b)) {
		s.dataOver = true
		return
	}
	s.data = append(s.data, b...)
}

func (s *sseReader) dispatch(sink sseSink) {
	switch {
	case s.dataOver:
		sink.event(nil, true)
	case s.hasPend:
		sink.event(s.pend, false)
	case s.hasData:
		sink.event(s.data, false)
	}
	s.data, s.hasData, s.dataOver, s.pend, s.hasPend = s.data[:0], false, false, nil, false
}

// pending reports whether an event's data has been read without its blank
// line, or a last line without its line end.
func (s *sseReader) pending() bool {
	return !s.ended && (s.hasData || s.hasPend || len(s.line) > 0)
}

// flush dispatches an event left without its blank line (a stream's last
// event, when the writer ended it with a single newline).
func (s *sseReader) flush(sink sseSink) {
	if len(s.line) > 0 && !s.lineOver {
		line := s.line
		s.line = s.line[:0]
		s.endLine(line, false, false, sink)
	}
	s.dispatch(sink)
}

// release gives back what the reader holds.
func (s *sseReader) release() {
	s.hold.release(cap(s.line) + cap(s.data))
	s.line, s.data = nil, nil
}
