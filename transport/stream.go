package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/llmtrace/llmtrace/internal/gunzip"
	"github.com/llmtrace/llmtrace/otelstats"
)

// ErrUnauthorized ends a stream that must present the collector's token
// (Config.Token) and did not open with a HELLO carrying it.
var ErrUnauthorized = errors.New("transport: stream did not open with a HELLO carrying the collector's token")

// ErrTimeout ends a stream that delivered nothing for Config.IdleTimeout
// (or an HTTP body that outlasted the server's read timeout).
var ErrTimeout = errors.New("transport: no data within the timeout")

// ErrEvicted ends a stream whose connection was closed at Config.MaxConns
// to admit a newcomer, before its producer was proven.
var ErrEvicted = errors.New("transport: closed at the connection cap before presenting the token or a HELLO or update")

// stream is the state of one stream being read.
type stream struct {
	c     *Collector
	clock streamClock
	st    StreamStats
	// needAuth: the stream's first frame or line must be a HELLO carrying
	// the collector's token; authed once it was.
	needAuth, authed bool
	// side is the side the stream's latest HELLO naming one named: the
	// default side of its updates that carry none (helloSide).
	side otelstats.Side
	// sides are the sides this stream is a producer of (SPEC §1 presence),
	// with the tracker's release for each; http says the stream is one
	// HTTP body, whose presence outlives it (httpPresence).
	sides [3]func()
	http  bool
	// slot is the connection's place among MaxConns, proven (never
	// evicted) by the stream's first HELLO or update; nil when there is
	// none, or once proven.
	slot *slot
}

// ServeStream reads one stream (a connection, stdin, an HTTP body) to its end
// and returns what it carried. The stream is trusted: no token is asked
// for (Serve and Handler ask for it where Config.Token says). It is safe to
// call from many goroutines at once, for different streams.
func (c *Collector) ServeStream(r io.Reader, name string) StreamStats {
	return c.serve(&stream{c: c}, r, name)
}

func (c *Collector) serve(s *stream, r io.Reader, name string) StreamStats {
	c.n.streams.Add(1)
	c.n.active.Add(1)
	c.inst.streams.Add(context.Background(), 1)
	defer func() {
		s.releaseSides()
		c.n.active.Add(-1)
		c.inst.streams.Add(context.Background(), -1)
	}()
	s.st.Producer = name
	// Wait for the first byte before taking a read buffer: an idle or
	// flooding connection then holds no more than its goroutine.
	var first [1]byte
	if n, err := io.ReadFull(r, first[:]); n == 0 {
		s.setErr(err)
		return s.st
	}
	br := c.getReader(io.MultiReader(bytes.NewReader(first[:]), r))
	defer c.putReader(br)
	switch b := first[0]; {
	case b == Magic[0]:
		s.st.Encoding = "binary"
		s.binary(br)
	case b == '{' || b == ' ' || b == '\t' || b == '\r' || b == '\n' || (b == utf8BOM[0] && skipBOM(br)):
		s.st.Encoding = "json"
		s.jsonLines(br)
	default:
		s.count(&s.st.Garbage, &c.n.garbage, "garbage")
	}
	return s.st
}

// skipBOM skips the byte order mark an editor may write at a file's
// start, as the update log does, and reports whether there was one.
func skipBOM(br *bufio.Reader) bool {
	if p, _ := br.Peek(len(utf8BOM)); !bytes.Equal(p, utf8BOM) {
		return false
	}
	_, _ = br.Discard(len(utf8BOM))
	return true
}

func (s *stream) setErr(err error) {
	if ge := (*gunzip.Error)(nil); errors.As(err, &ge) {
		s.st.Err = err // a gzip body cut short is damage, not a producer's end
		return
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if s.c.isShutdown() {
			return // Close's drain ended the stream
		}
		if s.st.Err == nil {
			s.count(&s.st.TimedOut, &s.c.n.timedOut, "timeout")
			s.st.Err = ErrTimeout
		}
		return
	}
	s.st.Err = err
}

// count bumps a stream counter, its collector total and the error metric.
func (s *stream) count(local *int64, total interface{ Add(int64) int64 }, metricErr string) {
	*local++
	total.Add(1)
	if metricErr != "" {
		s.c.inst.errs.Add(context.Background(), 1, s.c.inst.errAttrs[metricErr])
	}
}

// admit reports whether the stream may go on: false, and the stream counted
// unauthorized, when it needs the token and the next item is not a HELLO
// carrying it. hello is nil for an update.
func (s *stream) admit(hello *Hello) bool {
	if !s.needAuth || s.authed {
		return true
	}
	tok := s.c.cfg.Token
	if hello != nil && len(hello.Token) == len(tok) && subtle.ConstantTimeCompare([]byte(hello.Token), []byte(tok)) == 1 {
		s.authed = true
		return true
	}
	s.count(&s.st.Unauthorized, &s.c.n.unauthorized, "unauthorized")
	s.st.Err = ErrUnauthorized
	return false
}

func (s *stream) binary(br *bufio.Reader) {
	c := s.c
	hdr, err := br.Peek(headerLen)
	if err != nil {
		s.setErr(err)
		s.count(&s.st.Truncated, &c.n.truncated, "truncated")
		return
	}
	if string(hdr[:len(Magic)]) != Magic || hdr[len(Magic)] != Version {
		s.count(&s.st.Garbage, &c.n.garbage, "garbage")
		return
	}
	_, _ = br.Discard(headerLen)
	for {
		f, ok := s.nextFrame(br)
		if !ok {
			return
		}
		if !s.frame(&f) {
			return
		}
	}
}

// nextFrame reads the next frame; ok is false at the stream's end. A
// malformed frame is counted and skipped.
func (s *stream) nextFrame(br *bufio.Reader) (f Frame, ok bool) {
	c := s.c
	for {
		lb, err := br.Peek(4)
		if err != nil {
			if len(lb) > 0 {
				s.count(&s.st.Truncated, &c.n.truncated, "truncated")
			}
			s.setErr(err)
			return f, false
		}
		l, err := FrameLen(lb, c.cfg.MaxFrame)
		if err != nil {
			s.count(&s.st.Oversized, &c.n.oversized, "oversized")
			return f, false
		}
		fb, err := br.Peek(4 + l)
		if err != nil {
			s.count(&s.st.Truncated, &c.n.truncated, "truncated")
			s.setErr(err)
			return f, false
		}
		f, n, err := DecodeFrame(fb, c.cfg.MaxFrame)
		if err != nil {
			// The length is known, so the stream stays in sync.
			s.count(&s.st.Malformed, &c.n.malformed, "malformed")
			c.countRejection(otelstats.ReasonMalformed, nil)
			c.log.Debug("malformed frame", "producer", s.st.Producer, "err", err)
			_, _ = br.Discard(4 + l)
			if s.needAuth && !s.authed {
				return f, s.admit(nil)
			}
			continue
		}
		_, _ = br.Discard(n)
		return f, true
	}
}

// frame applies one decoded frame; false ends the stream.
func (s *stream) frame(f *Frame) bool {
	switch f.Type {
	case FrameHello:
		if !s.admit(&f.Hello) {
			return false
		}
		s.hello(f.Hello, true)
	case FrameUpdate:
		if !s.admit(nil) {
			return false
		}
		if f.Reject != nil {
			s.reject(f.Reject, otelstats.ReasonMissingPayload)
			return true
		}
		s.stamped(&f.Update, f.Stamp)
	default:
		// PING and the types of later versions carry nothing for us, but
		// they are no way in without the token either.
		return s.admit(nil)
	}
	return true
}

// stamped maps st onto wall time, sets it as u's time and queues u, or
// rejects u when st cannot be mapped.
func (s *stream) stamped(u *otelstats.Update, st Stamp) {
	s.proven()
	s.helloSide(u)
	t, e := s.clock.wall(st)
	switch e {
	case clockNoAnchor:
		s.count(&s.st.NoAnchor, &s.c.n.noAnchor, "no_anchor")
		s.reject(&otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side,
			Reason: otelstats.ReasonBadTimestamp, Detail: "a monotonic time before any HELLO"}, otelstats.ReasonBadTimestamp)
	case clockOutOfRange:
		s.reject(&otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side,
			Reason: otelstats.ReasonBadTimestamp, Detail: "the time mapped through the stream's HELLO is outside 1970–2200"}, otelstats.ReasonBadTimestamp)
	default:
		u.Time = t
		s.push(u)
	}
}

// present makes the stream a producer of side (SPEC §1): while it is open,
// the tracker counts the side as present, so a request the other side
// finishes waits, within the grace, for this side's late updates. An HTTP
// body's side stays present a while after it (httpPresence).
func (s *stream) present(side otelstats.Side) {
	if side != otelstats.SideFrontend && side != otelstats.SideEngine {
		return
	}
	if s.http {
		s.c.httpSides.saw(s.c.tr, side)
	}
	if s.sides[side] == nil {
		s.sides[side] = s.c.tr.SideConnected(side)
	}
}

// releaseSides ends the stream's presence once the tracker has applied
// what the stream queued.
func (s *stream) releaseSides() {
	var held []func()
	for _, release := range s.sides {
		if release != nil {
			held = append(held, release)
		}
	}
	if len(held) == 0 {
		return
	}
	s.c.afterQueued(func() {
		for _, release := range held {
			release()
		}
	})
}

// updateSide is the side an update says it comes from: its own, else its
// kind's. ARRIVED makes no stream a frontend: an engine that records its
// requests' arrivals itself is not a frontend whose FINISHED to wait for.
func updateSide(u *otelstats.Update) otelstats.Side {
	switch {
	case u.Kind == otelstats.KindArrived:
		return otelstats.SideAuto
	case u.Side != otelstats.SideAuto:
		return u.Side
	}
	switch u.Kind {
	case otelstats.KindInputProcessed, otelstats.KindDetokenized, otelstats.KindFinished:
		return otelstats.SideFrontend // FINISHED without a side is the frontend's
	}
	return otelstats.SideEngine // the scheduler's kinds, KV transfers, encoder runs
}

// helloSide gives u, when it carries no side and its kind is recorded by
// either side (FINISHED), the side the stream's HELLO named: a producer that
// declared itself the engine ends the engine's side of a request, not the
// frontend's, with a FINISHED that leaves the side out. A kind that belongs
// to one side keeps it (an engine that records its requests' arrivals
// itself sends ARRIVED all the same), and without a HELLO naming a side the
// wire default holds (FINISHED: the frontend's). Each HTTP body is a stream
// of its own: its HELLO decides for that body alone.
func (s *stream) helloSide(u *otelstats.Update) {
	if u.Side == otelstats.SideAuto && u.Kind == otelstats.KindFinished && s.side != otelstats.SideAuto {
		u.Side = s.side
	}
}

// proven protects the stream's connection from eviction: it delivered a
// HELLO or an update, which needAuth lets through only once the token
// was presented.
func (s *stream) proven() {
	if s.slot != nil {
		s.slot.prove()
		s.slot = nil
	}
}

// hello applies a HELLO; mono says it carries a monotonic reading (a
// JSON HELLO may carry its wall clock alone).
func (s *stream) hello(h Hello, mono bool) {
	s.proven()
	s.present(h.Side)
	if h.Side == otelstats.SideFrontend || h.Side == otelstats.SideEngine {
		s.side = h.Side // a HELLO naming no side keeps the one named before
	}
	s.clock.anchor(h)
	if s.c.cfg.AlignClocks && !s.clock.aligned {
		s.clock.align(s.c.clocks.offset(h, mono, s.c.cfg.now().UnixNano()))
	}
	if h.Producer != "" {
		s.st.Producer = h.Producer
	}
	if s.st.Hellos == 0 && !s.http {
		s.c.log.Info("producer connected", "producer", s.st.Producer, "side", sideName(h.Side), "encoding", s.st.Encoding)
	}
	s.st.Hellos++
	s.c.n.hellos.Add(1)
}

func sideName(s otelstats.Side) string {
	if s == otelstats.SideAuto {
		return "unnamed"
	}
	return s.String()
}

func (s *stream) push(u *otelstats.Update) {
	c := s.c
	s.present(updateSide(u))
	if c.enqueue(u) {
		s.st.Updates++
		c.n.updates.Add(1)
		c.inst.updates.Add(context.Background(), 1, c.inst.queued)
		return
	}
	s.st.Dropped++
	c.n.dropped.Add(1)
	c.inst.updates.Add(context.Background(), 1, c.inst.dropped)
}

func (s *stream) reject(re *otelstats.RejectError, reason otelstats.Reason) {
	s.st.Rejected++
	s.c.n.rejected.Add(1)
	s.c.countRejection(reason, re)
	s.c.rejectedHook(re)
}

func (s *stream) jsonLines(br *bufio.Reader) {
	c := s.c
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(lineContent(line)) > c.cfg.MaxLine {
			s.count(&s.st.Oversized, &c.n.oversized, "oversized")
			c.countRejection(otelstats.ReasonTooLong, nil)
			if !s.admit(nil) {
				return
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				s.setErr(err)
				return
			}
			continue
		}
		complete := err == nil
		// A byte order mark before a line is skipped, as the update log
		// skips it: streams saved by an editor and concatenated.
		if t := finiteJSON(bytes.TrimSpace(bytes.TrimPrefix(line, utf8BOM))); len(t) > 0 && !s.jsonLine(t, complete) {
			return
		}
		// An empty line is the JSON encoding's PING.
		if err != nil {
			s.setErr(err)
			return
		}
	}
}

// lineContent is line without its end, "\n" or "\r\n": a Windows
// producer's CRLF is no byte of the line MaxLine bounds.
func lineContent(line []byte) []byte {
	if l := bytes.TrimSuffix(line, newline); len(l) < len(line) {
		return bytes.TrimSuffix(l, []byte{'\r'})
	}
	return line
}

// lineExtras are the fields read only from lines that mention HELLO or
// mono_ts, so the common line is parsed once. They are kept raw, so that
// a field of the wrong type fails only what reads it: a HELLO with a bad
// wall_ts is a malformed HELLO, not a line without a type, and an update
// that also carries a "producer" number keeps its mono_ts.
type lineExtras struct {
	Type     json.RawMessage `json:"type"`
	TS       json.RawMessage `json:"ts"`
	MonoTS   json.RawMessage `json:"mono_ts"`
	WallTS   json.RawMessage `json:"wall_ts"`
	Producer json.RawMessage `json:"producer"`
	Side     json.RawMessage `json:"side"`
	Token    json.RawMessage `json:"token"`
}

var (
	newline   = []byte{'\n'}
	monoKey   = []byte(`"mono_ts"`)
	helloName = []byte(`hello`)
)

// jsonLine handles one trimmed line; complete says it ended with a newline.
// It returns false when the stream must end.
func (s *stream) jsonLine(line []byte, complete bool) bool {
	var x lineExtras
	extras := bytes.Contains(line, monoKey) || containsFold(line, helloName)
	if extras {
		d := json.NewDecoder(bytes.NewReader(line))
		d.UseNumber()
		if d.Decode(&x) != nil {
			extras = false // ParseUpdate reports it
		}
	}
	if extras && isHello(x.Type) {
		return s.jsonHello(&x)
	}
	if !s.admit(nil) {
		return false
	}
	parse := line
	monoOnly := extras && !isNull(x.MonoTS) && isNull(x.TS)
	if monoOnly {
		parse = withTS(line)
	}
	u, err := ParseUpdate(parse)
	if err != nil {
		s.jsonReject(line, err, complete)
		return true
	}
	st := Stamp{Ns: u.Time.UnixNano()}
	if monoOnly {
		ns, ok := seconds(x.MonoTS)
		if !ok {
			s.reject(&otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side,
				Reason: otelstats.ReasonBadTimestamp, Detail: "mono_ts must be non-negative seconds"}, otelstats.ReasonBadTimestamp)
			return true
		}
		st = Stamp{Ns: ns, Mono: true}
	}
	s.stamped(&u, st)
	return true
}

// cutShort reports whether line ends inside its JSON value: the stream
// ended in the middle of a line. A final line that is whole but breaks a
// rule is rejected for that rule, as with its newline.
func cutShort(line []byte) bool {
	var v json.RawMessage
	return errors.Is(json.NewDecoder(bytes.NewReader(line)).Decode(&v), io.ErrUnexpectedEOF)
}

// isNull reports whether a field is absent or null: Python's json.dumps
// of an optional field that is None, as a dataclass with both ts and
// mono_ts writes the one it does not use.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// withTS is line with a placeholder ts, which ParseUpdate needs; the real
// time comes from mono_ts. It goes last, where it wins over a "ts":null
// (the last of duplicate keys wins). A line that does not end its object
// is left as it is, for ParseUpdate to refuse.
func withTS(line []byte) []byte {
	if len(line) == 0 || line[len(line)-1] != '}' {
		return line
	}
	parse := make([]byte, 0, len(line)+8)
	parse = append(parse, line[:len(line)-1]...)
	return append(parse, `,"ts":1}`...)
}

// jsonReject counts a line ParseUpdate refused; complete says it ended
// with a newline.
func (s *stream) jsonReject(line []byte, err error, complete bool) {
	c := s.c
	if !complete && cutShort(line) {
		s.count(&s.st.Truncated, &c.n.truncated, "truncated")
		return
	}
	var re *otelstats.RejectError
	if errors.As(err, &re) && re.Reason == otelstats.ReasonMalformed {
		s.count(&s.st.Malformed, &c.n.malformed, "malformed")
	} else {
		s.st.Rejected++
		c.n.rejected.Add(1)
	}
	if re != nil {
		_ = c.tr.Reject(re) // counted under its reason
		c.rejectedHook(re)
	}
}

// jsonHello applies a HELLO line, which decoded whole: a bad one is
// malformed, with or without its newline.
func (s *stream) jsonHello(x *lineExtras) bool {
	h, detail := parseJSONHello(x)
	if detail != "" {
		c := s.c
		s.count(&s.st.Malformed, &c.n.malformed, "malformed")
		c.countRejection(otelstats.ReasonMalformed, nil)
		c.log.Debug("bad HELLO", "producer", s.st.Producer, "detail", detail)
		return s.admit(nil)
	}
	if !s.admit(&h) {
		return false
	}
	s.hello(h, !isNull(x.MonoTS))
	if isNull(x.MonoTS) {
		// A wall-only HELLO names the producer (and aligns its clock) but
		// anchors no monotonic clock.
		s.clock.anchored = false
	}
	return true
}

// parseJSONHello reads a HELLO line's fields; detail says what is wrong.
func parseJSONHello(x *lineExtras) (h Hello, detail string) {
	if isNull(x.WallTS) {
		return h, "wall_ts is required"
	}
	wall, ok := seconds(x.WallTS)
	if !ok || wall <= 0 {
		return h, "wall_ts must be Unix seconds"
	}
	h.WallNs = wall
	if !isNull(x.MonoTS) {
		if h.MonoNs, ok = seconds(x.MonoTS); !ok {
			return h, "mono_ts must be non-negative seconds"
		}
	}
	var side, tok string
	for _, f := range [...]struct {
		dst  *string
		raw  json.RawMessage
		name string
	}{{&h.Producer, x.Producer, "producer"}, {&side, x.Side, "side"}, {&tok, x.Token, "token"}} {
		if !isNull(f.raw) && json.Unmarshal(f.raw, f.dst) != nil {
			return h, f.name + " must be a string"
		}
	}
	h.Producer = cut(h.Producer, MaxProducerName)
	if h.Side, ok = otelstats.ParseSide(side); !ok {
		return h, "side must be frontend or engine"
	}
	if len(tok) > MaxTokenLen {
		return h, "token is too long"
	}
	h.Token = tok
	return h, ""
}

// seconds reads a raw JSON number of seconds (or a string holding one, as
// the update log's numbers may be) exactly into nanoseconds.
func seconds(raw json.RawMessage) (int64, bool) {
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	return parseSeconds(n.String())
}

func isHello(raw json.RawMessage) bool {
	var t string
	return json.Unmarshal(raw, &t) == nil && len(t) == 5 && containsFold([]byte(t), helloName)
}

// containsFold reports whether b contains the ASCII word w (lower case) in
// any case.
func containsFold(b, w []byte) bool {
	for i := 0; i+len(w) <= len(b); i++ {
		j := 0
		for ; j < len(w); j++ {
			if b[i+j]|0x20 != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
}

// countRejection counts a rejection the tracker never saw under its reason
// in llm.rejected_updates.
func (c *Collector) countRejection(reason otelstats.Reason, re *otelstats.RejectError) {
	if re == nil {
		re = &otelstats.RejectError{Reason: reason}
	}
	_ = c.tr.Reject(re)
}
