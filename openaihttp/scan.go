package openaihttp

import (
	"bytes"
	"encoding/json"
)

// fieldScanner reads the top-level members of one JSON object fed to it in
// pieces, as the bytes go by, keeping the raw value of each wanted key up
// to that key's cap and skipping everything else. A body of any size costs
// the caps, never its length: a 15 MB prompt whose "model" comes last (the
// order the OpenAI SDKs write) is read without holding any of it.
//
// Keys match without regard to case and a later duplicate replaces an
// earlier one, as in encoding/json. A value cut off (the input ended or
// broke inside it) is not kept; values completed before a syntax error
// are. A key whose head the set keeps (fieldSet.heads) keeps the first
// cap bytes of a longer or cut-off value instead, for head. The zero value
// is not usable: use newFieldScanner. Not safe for concurrent use.
type fieldScanner struct {
	set  *fieldSet
	vals []fieldValue // per wanted key
	// buf holds every kept value back to back, the one being read last;
	// its capacity is reserved from hold (nil: unbounded by a budget).
	buf  []byte
	hold *hold

	st      scanState
	depth   int      // nesting inside the value being read
	kinds   []uint64 // per depth, whether it is an object (bit set) or an array
	inStr   bool     // inside a string of the value being read
	esc     bool     // after a backslash inside a string
	key     []byte
	keyEsc  bool // the key has an escape: compare it unquoted
	keyOver bool
	cur     int // wanted index of the value being read, -1 when skipped
	// tap, when set, also reads every byte of wanted key tapKey's value,
	// however long (a response's choices: choiceScan).
	tap    *choiceScan
	tapKey int
	one    [1]byte // a value's first byte, captured without a heap slice
	// The elements of the array value of the key fieldSet.counts names
	// (a batch of prompts), counted as the bytes go by: the first
	// element's first byte, the commas after it, and whether the value
	// was read to its end.
	counting   bool
	elemFirst  byte
	elemCommas int
	elemsRead  bool
	done       bool
	bad        bool
	stopped    bool // released: reads nothing more
}

// fieldValue is what the scanner kept of one wanted key.
type fieldValue struct {
	start, end int  // the value in buf
	ok         bool // a complete value
	over       bool // the value was longer than its cap (or the budget refused it)
}

// fieldSet is a fixed list of wanted keys (lower case) and their caps.
type fieldSet struct {
	keys []string
	caps []int
	// heads has bit i set when a value of key i longer than its cap keeps
	// its first cap bytes rather than nothing: a prompt captured as
	// content is worth its head, a number or a model cut short is not.
	heads uint64
	// counts has the bit of the one key whose array elements are counted
	// (batch), however long the value and whatever its cap.
	counts uint64
}

// keepsHead reports whether wanted key i keeps the head of a long value.
func (fs *fieldSet) keepsHead(i int) bool { return fs.heads&(1<<i) != 0 }

// index returns the wanted index of key (already lower-cased), or -1.
func (fs *fieldSet) index(key []byte) int {
	for i, k := range fs.keys {
		if string(key) == k {
			return i
		}
	}
	return -1
}

type scanState uint8

const (
	scanStart      scanState = iota // before '{'
	scanKeyOrEnd                    // after '{' or ','
	scanKey                         // inside a key
	scanColon                       // after a key
	scanValueStart                  // after ':'
	scanValue                       // inside a value
	scanAfterValue                  // after a value
)

// maxKey bounds a key the scanner compares; longer keys are never wanted.
const maxKey = 64

func newFieldScanner(set *fieldSet, h *hold) *fieldScanner {
	s := &fieldScanner{}
	s.init(set, h)
	return s
}

// init readies a zero scanner (one embedded in the proxy's call).
func (s *fieldScanner) init(set *fieldSet, h *hold) {
	s.set, s.vals, s.hold, s.cur = set, make([]fieldValue, len(set.keys)), h, -1
}

// complete reports whether the object's closing brace was read.
func (s *fieldScanner) complete() bool { return s.done }

// finished reports whether the scanner reads nothing more: the object
// ended, was not JSON, or the scanner was released.
func (s *fieldScanner) finished() bool { return s.done || s.bad || s.stopped }

// value returns the raw value of wanted key i ("" when absent, cut off or
// over its cap) and whether it was over its cap.
func (s *fieldScanner) value(i int) (json.RawMessage, bool) {
	v := &s.vals[i]
	if !v.ok {
		return nil, v.over
	}
	return s.buf[v.start:v.end:v.end], v.over
}

// head returns what was kept of wanted key i's raw value, whole or not,
// and whether it is only the head: the value was over its cap (a key that
// keeps its head, fieldSet.heads) or the input ended inside it.
func (s *fieldScanner) head(i int) (raw []byte, cut bool) {
	v := &s.vals[i]
	return s.buf[v.start:v.end:v.end], !v.ok
}

// feed reads the next bytes of the object.
func (s *fieldScanner) feed(p []byte) { s.feedRest(p) }

// reset readies the scanner for another object, keeping its storage.
func (s *fieldScanner) reset() {
	clear(s.vals)
	s.buf, s.st, s.depth, s.inStr, s.esc, s.key, s.cur, s.done, s.bad = s.buf[:0], scanStart, 0, false, false, s.key[:0], -1, false, false
	s.counting, s.elemFirst, s.elemCommas, s.elemsRead = false, 0, 0, false
}

// feedRest reads the next bytes of the object and returns those after its
// end.
func (s *fieldScanner) feedRest(p []byte) []byte {
	for len(p) > 0 && !s.done && !s.bad && !s.stopped {
		switch s.st {
		case scanValue:
			p = s.inValue(p)
		case scanKey:
			p = s.inKey(p)
		default:
			c := p[0]
			p = p[1:]
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				continue
			}
			s.structural(c)
		}
	}
	return p
}

// structural handles one non-blank byte outside keys and values.
func (s *fieldScanner) structural(c byte) {
	switch s.st {
	case scanStart:
		if c != '{' {
			s.bad = true
			return
		}
		s.st = scanKeyOrEnd
	case scanKeyOrEnd:
		switch c {
		case '"':
			s.st, s.key, s.keyEsc, s.keyOver, s.esc = scanKey, s.key[:0], false, false, false
		case '}':
			s.done = true
		default:
			s.bad = true
		}
	case scanColon:
		if c != ':' {
			s.bad = true
			return
		}
		s.st = scanValueStart
	case scanValueStart:
		s.beginValue(c)
	case scanAfterValue:
		switch c {
		case ',':
			s.st = scanKeyOrEnd
		case '}':
			s.done = true
		default:
			s.bad = true
		}
	}
}

// inKey reads a key's bytes up to its closing quote.
func (s *fieldScanner) inKey(p []byte) []byte {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc, s.keyEsc = true, true
		case c == '"':
			s.appendKey(p[:i])
			s.endKey()
			return p[i+1:]
		}
	}
	s.appendKey(p)
	return nil
}

func (s *fieldScanner) appendKey(b []byte) {
	if s.keyOver || len(s.key)+len(b) > maxKey {
		s.keyOver = true
		return
	}
	s.key = append(s.key, b...)
}

func (s *fieldScanner) endKey() {
	s.st, s.cur, s.counting = scanColon, -1, false
	if s.keyOver {
		return
	}
	key := s.key
	if s.keyEsc {
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) != nil {
			return
		}
		key = []byte(k)
	}
	s.cur = s.set.index(lower(key))
	if s.counting = s.cur >= 0 && s.set.counts&(1<<s.cur) != 0; s.counting {
		s.elemFirst, s.elemCommas, s.elemsRead = 0, 0, false
	}
	if s.tap != nil && s.cur == s.tapKey {
		s.tap.reset()
	}
	if s.cur >= 0 {
		// A later duplicate replaces the earlier value: the new one starts
		// at the end of what is kept.
		s.forget(s.cur)
		s.vals[s.cur] = fieldValue{start: len(s.buf), end: len(s.buf)}
	}
}

// forget removes value i's bytes from buf, moving the values after it
// down, so that duplicates never make the scanner hold more than its caps.
// A value moves at most once per time it is read (it is then last), so a
// body of duplicates costs time linear in its size.
func (s *fieldScanner) forget(i int) {
	v := s.vals[i]
	n := v.end - v.start
	if n == 0 {
		return
	}
	copy(s.buf[v.start:], s.buf[v.end:])
	s.buf = s.buf[:len(s.buf)-n]
	for j := range s.vals {
		if w := &s.vals[j]; w.start >= v.end {
			w.start, w.end = w.start-n, w.end-n
		}
	}
}

// lower returns b in lower case, in place when it is ASCII (it is the
// scanner's own copy of a key), as bytes.ToLower otherwise.
func lower(b []byte) []byte {
	for _, c := range b {
		if c >= 0x80 {
			return bytes.ToLower(b)
		}
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

// beginValue starts a value at its first byte c.
func (s *fieldScanner) beginValue(c byte) {
	s.st, s.depth, s.inStr, s.esc = scanValue, 0, false, false
	switch c {
	case '"':
		s.inStr = true
	case '{', '[':
		s.push(c)
	case '}', ']', ',', ':':
		s.bad = true
		return
	}
	s.one[0] = c
	s.capture(s.one[:])
}

// inValue reads a value's bytes up to its end, capturing them when wanted,
// and returns what follows it (nil when p ended first, or the value broke).
func (s *fieldScanner) inValue(p []byte) []byte {
	i := 0
	q := -1 // the next '"' at or after i (len(p): none), once looked for
	for i < len(p) {
		end := false
		switch {
		case s.inStr:
			var more bool
			if i, q, more = s.inString(p, i, q); !more {
				i = len(p)
				continue
			}
			end = !s.inStr && s.depth == 0
		case s.depth == 0: // a scalar
			if c := p[i]; c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				s.capture(p[:i])
				s.endValue()
				return p[i:]
			}
			i++
		default:
			c := p[i]
			i++
			if !s.structure(c) {
				return nil
			}
			end = s.depth == 0
		}
		if end {
			s.capture(p[:i])
			s.endValue()
			return p[i:]
		}
	}
	s.capture(p)
	return nil
}

// inString reads on in a string from p[i]; q is the next '"' at or after
// i once looked for (len(p): none). Strings are most of a prompt, so it
// jumps to what can end one, looking for the closing quote once however
// many escapes come before it. more is false when p ended inside the
// string.
func (s *fieldScanner) inString(p []byte, i, q int) (next, nextQ int, more bool) {
	if s.esc {
		s.esc = false
		return i + 1, q, true
	}
	if q < i {
		if q = bytes.IndexByte(p[i:], '"'); q < 0 {
			q = len(p)
		} else {
			q += i
		}
	}
	if j := bytes.IndexByte(p[i:q], '\\'); j >= 0 {
		s.esc = true
		return i + j + 1, q, true
	}
	if q == len(p) {
		return len(p), q, false
	}
	s.inStr = false
	return q + 1, q, true
}

// structure reads one byte inside a container, outside strings; false when
// the brackets do not match (the scanner is then bad).
func (s *fieldScanner) structure(c byte) bool {
	if s.counting && s.depth == 1 {
		s.countElem(c)
	}
	switch c {
	case '"':
		s.inStr = true
	case '{', '[':
		return s.push(c)
	case '}', ']':
		return s.pop(c)
	}
	return true
}

// countElem notes a byte of the counted array between its elements: the
// first element's first byte, and each comma after it.
func (s *fieldScanner) countElem(c byte) {
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
	case s.elemFirst == 0:
		s.elemFirst = c
	case c == ',':
		s.elemCommas++
	}
}

// batch returns how many elements the counted key's value holds when it
// is an array of strings or of arrays (a batch of prompts), -1 when such
// an array was not read to its end, and 0 for any other value or none.
func (s *fieldScanner) batch() int {
	switch {
	case s.elemFirst != '"' && s.elemFirst != '[':
		return 0
	case !s.elemsRead:
		return -1
	}
	return s.elemCommas + 1
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// push enters a container opened by c.
func (s *fieldScanner) push(c byte) bool {
	if s.depth == maxDepth {
		s.bad = true
		return false
	}
	w, b := s.depth/64, uint(s.depth%64)
	for len(s.kinds) <= w {
		s.kinds = append(s.kinds, 0)
	}
	if c == '{' {
		s.kinds[w] |= 1 << b
	} else {
		s.kinds[w] &^= 1 << b
	}
	s.depth++
	return true
}

// pop leaves the innermost container, which c must close.
func (s *fieldScanner) pop(c byte) bool {
	s.depth--
	w, b := s.depth/64, uint(s.depth%64)
	if obj := s.kinds[w]&(1<<b) != 0; obj != (c == '}') {
		s.bad = true
		return false
	}
	return true
}

// capture appends b to the value being read, if it is wanted and fits.
func (s *fieldScanner) capture(b []byte) {
	i := s.cur
	if i < 0 || len(b) == 0 {
		return
	}
	if s.tap != nil && i == s.tapKey {
		s.tap.feed(b)
	}
	if s.vals[i].over {
		return
	}
	v := &s.vals[i]
	over := v.end-v.start+len(b) > s.set.caps[i]
	if over {
		if !s.set.keepsHead(i) {
			s.drop(i)
			return
		}
		b = b[:s.set.caps[i]-(v.end-v.start)]
	}
	var ok bool
	if s.buf, ok = s.hold.grow(s.buf, len(b), 64, 0); !ok {
		s.drop(i)
		return
	}
	s.buf = append(s.buf, b...)
	v.end, v.over = len(s.buf), over
}

// drop gives up the value being read (it is the last in buf); a key that
// keeps its head keeps what it has.
func (s *fieldScanner) drop(i int) {
	v := &s.vals[i]
	if s.set.keepsHead(i) {
		v.over = true
		return
	}
	s.buf = s.buf[:v.start]
	*v = fieldValue{start: v.start, end: v.start, over: true}
}

// endValue ends the value being read: a wanted value is now complete.
func (s *fieldScanner) endValue() {
	if s.cur >= 0 && !s.vals[s.cur].over {
		s.vals[s.cur].ok = true
	}
	s.elemsRead = s.elemsRead || s.counting
	s.st, s.cur, s.counting = scanAfterValue, -1, false
}

// release gives back what the scanner holds; it reads nothing more.
func (s *fieldScanner) release() {
	if s.tap != nil {
		s.tap.release()
	}
	s.stopped = true
	s.hold.release(cap(s.buf))
	s.buf = nil
	clear(s.vals)
}
