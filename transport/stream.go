package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// stream is the state of one stream being read.
type stream struct {
	c     *Collector
	clock streamClock
	st    StreamStats
}

// ServeStream reads one stream (a connection, stdin, an HTTP body) to its end
// and returns what it carried. It is safe to call from many goroutines at
// once, for different streams.
func (c *Collector) ServeStream(r io.Reader, name string) StreamStats {
	c.n.streams.Add(1)
	c.n.active.Add(1)
	c.inst.streams.Add(context.Background(), 1)
	defer func() {
		c.n.active.Add(-1)
		c.inst.streams.Add(context.Background(), -1)
	}()
	s := &stream{c: c}
	s.st.Producer = name
	size := max(c.cfg.MaxFrame+4, c.cfg.MaxLine+1, 4096)
	br := bufio.NewReaderSize(r, size)
	first, err := br.Peek(1)
	if err != nil {
		s.setErr(err)
		return s.st
	}
	switch b := first[0]; {
	case b == Magic[0]:
		s.st.Encoding = "binary"
		s.binary(br)
	case b == '{' || b == ' ' || b == '\t' || b == '\r' || b == '\n':
		s.st.Encoding = "json"
		s.jsonLines(br)
	default:
		s.count(&s.st.Garbage, &c.n.garbage, "garbage")
	}
	return s.st
}

func (s *stream) setErr(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) && s.c.isShutdown() {
		return // Close's drain ended the stream
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
		lb, err := br.Peek(4)
		if err != nil {
			if len(lb) > 0 {
				s.count(&s.st.Truncated, &c.n.truncated, "truncated")
			}
			s.setErr(err)
			return
		}
		l, err := FrameLen(lb, c.cfg.MaxFrame)
		if err != nil {
			s.count(&s.st.Oversized, &c.n.oversized, "oversized")
			return
		}
		fb, err := br.Peek(4 + l)
		if err != nil {
			s.count(&s.st.Truncated, &c.n.truncated, "truncated")
			s.setErr(err)
			return
		}
		f, n, err := DecodeFrame(fb, c.cfg.MaxFrame)
		if err != nil {
			// The length is known, so the stream stays in sync.
			s.count(&s.st.Malformed, &c.n.malformed, "malformed")
			c.countRejection(otelstats.ReasonMalformed, nil)
			c.log.Debug("malformed frame", "producer", s.st.Producer, "err", err)
			_, _ = br.Discard(4 + l)
			continue
		}
		_, _ = br.Discard(n)
		switch f.Type {
		case FrameHello:
			s.hello(f.Hello)
		case FrameUpdate:
			if f.Reject != nil {
				s.reject(f.Reject, otelstats.ReasonMissingPayload)
				continue
			}
			t, ok := s.clock.wall(f.Stamp)
			if !ok {
				s.noAnchor(&f.Update)
				continue
			}
			f.Update.Time = t
			s.push(&f.Update)
		}
	}
}

func (s *stream) hello(h Hello) {
	s.clock.hello(h, s.c.cfg.now().UnixNano(), s.c.cfg.AlignClocks)
	if h.Producer != "" {
		s.st.Producer = h.Producer
	}
	s.st.Hellos++
	s.c.n.hellos.Add(1)
}

func (s *stream) push(u *otelstats.Update) {
	c := s.c
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

func (s *stream) noAnchor(u *otelstats.Update) {
	s.count(&s.st.NoAnchor, &s.c.n.noAnchor, "no_anchor")
	s.reject(&otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side,
		Reason: otelstats.ReasonBadTimestamp, Detail: "a monotonic time before any HELLO"}, otelstats.ReasonBadTimestamp)
}

func (s *stream) jsonLines(br *bufio.Reader) {
	c := s.c
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > c.cfg.MaxLine {
			s.count(&s.st.Oversized, &c.n.oversized, "oversized")
			c.countRejection(otelstats.ReasonTooLong, nil)
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
		if t := bytes.TrimSpace(line); len(t) > 0 {
			s.jsonLine(t, complete)
		}
		if err != nil {
			s.setErr(err)
			return
		}
	}
}

// helloLine and its fields are read only from lines that mention HELLO or
// mono_ts, so the common line is parsed once.
type lineExtras struct {
	Type     json.RawMessage `json:"type"`
	TS       json.RawMessage `json:"ts"`
	MonoTS   *json.Number    `json:"mono_ts"`
	WallTS   *json.Number    `json:"wall_ts"`
	Producer *string         `json:"producer"`
}

var (
	monoKey   = []byte(`"mono_ts"`)
	helloName = []byte(`hello`)
)

// jsonLine handles one trimmed line; complete says it ended with a newline.
func (s *stream) jsonLine(line []byte, complete bool) {
	c := s.c
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
		s.jsonHello(&x, complete)
		return
	}
	parse := line
	monoOnly := extras && x.MonoTS != nil && len(x.TS) == 0
	if monoOnly {
		// ParseUpdate needs a ts; the real time comes from mono_ts below.
		parse = make([]byte, 0, len(line)+8)
		parse = append(parse, '{')
		parse = append(parse, `"ts":1,`...)
		parse = append(parse, line[1:]...)
	}
	u, err := ParseUpdate(parse)
	if err != nil {
		if !complete {
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
		return
	}
	if monoOnly {
		ns, ok := parseSeconds(x.MonoTS.String())
		if !ok {
			s.reject(&otelstats.RejectError{RequestID: u.RequestID, Kind: u.Kind, Side: u.Side,
				Reason: otelstats.ReasonBadTimestamp, Detail: "mono_ts must be non-negative seconds"}, otelstats.ReasonBadTimestamp)
			return
		}
		t, ok := s.clock.wall(Stamp{Ns: ns, Mono: true})
		if !ok {
			s.noAnchor(&u)
			return
		}
		u.Time = t
	} else if s.clock.offset != 0 {
		u.Time = u.Time.Add(time.Duration(s.clock.offset))
	}
	s.push(&u)
}

func (s *stream) jsonHello(x *lineExtras, complete bool) {
	c := s.c
	bad := func(detail string) {
		if !complete {
			s.count(&s.st.Truncated, &c.n.truncated, "truncated")
			return
		}
		s.count(&s.st.Malformed, &c.n.malformed, "malformed")
		c.countRejection(otelstats.ReasonMalformed, nil)
		c.log.Debug("bad HELLO", "producer", s.st.Producer, "detail", detail)
	}
	var h Hello
	if x.WallTS == nil {
		bad("wall_ts is required")
		return
	}
	wall, ok := parseSeconds(x.WallTS.String())
	if !ok || wall <= 0 {
		bad("wall_ts must be Unix seconds")
		return
	}
	h.WallNs = wall
	if x.MonoTS != nil {
		if h.MonoNs, ok = parseSeconds(x.MonoTS.String()); !ok {
			bad("mono_ts must be non-negative seconds")
			return
		}
	}
	if x.Producer != nil {
		h.Producer = *x.Producer
		if len(h.Producer) > MaxProducerName {
			h.Producer = h.Producer[:MaxProducerName]
		}
	}
	s.hello(h)
	if x.MonoTS == nil {
		// A wall-only HELLO names the producer (and aligns its clock) but
		// anchors no monotonic clock.
		s.clock.anchored = false
	}
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
