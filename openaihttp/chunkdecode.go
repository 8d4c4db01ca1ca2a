package openaihttp

import "encoding/json"

// decode fills c from one event's JSON exactly as json.Unmarshal(data, c)
// would, and reports what Unmarshal would: whether data is valid JSON of
// the expected shape. It is the per-chunk hot path (encoding/json's
// reflection took half of a proxied chunk's cost): a scanner for the
// shape servers send — an object whose keys we read are lower-case ASCII
// without escapes, each once, of the expected types — that validates all
// of data as Unmarshal does, and hands anything else (a key in capitals,
// a duplicate, a number of the wrong kind, deep nesting, invalid JSON) to
// Unmarshal itself. FuzzChunkDecode holds the two to the same results.
func (c *chunkJSON) decode(data []byte) bool {
	c.reset()
	p := chunkParser{b: data}
	if p.chunk(c) {
		return true
	}
	c.reset()
	return json.Unmarshal(data, c) == nil
}

// chunkStore is where the scanner puts what Unmarshal would allocate: the
// pointed-to parts of a chunk, so that decoding one allocates nothing.
type chunkStore struct {
	usage    [2]usageJSON // the chunk's, its response's
	details  [4]detailsJSON
	response responseJSON
	reasons  [2]reasonJSON
	ints     [12]tokenCount
	nUsage   int8
	nDetails int8
	nReasons int8
	nInts    int8
	usedResp bool
}

// reset zeroes what the last event used.
func (st *chunkStore) reset() {
	clear(st.usage[:st.nUsage])
	clear(st.details[:st.nDetails])
	clear(st.reasons[:st.nReasons])
	if st.usedResp {
		st.response = responseJSON{}
	}
	st.nUsage, st.nDetails, st.nReasons, st.nInts, st.usedResp = 0, 0, 0, 0, false
}

// maxScanDepth bounds the nesting the scanner follows; deeper input goes
// to encoding/json (whose own limit is 10,000).
const maxScanDepth = 64

// chunkParser reads one JSON value from b. Any input it does not handle
// exactly as encoding/json would — or invalid input — sets bad, and the
// caller falls back to encoding/json.
type chunkParser struct {
	b     []byte
	i     int
	depth int
	bad   bool
}

func (p *chunkParser) fail() {
	p.bad = true
	p.i = len(p.b) // every loop ends
}

// peek returns the next byte after blanks, 0 at the end. Servers send
// compact JSON: the next byte is mostly not a blank, and that check is
// inlined.
func (p *chunkParser) peek() byte {
	if p.i < len(p.b) && p.b[p.i] > ' ' {
		return p.b[p.i]
	}
	return p.peekBlanks()
}

func (p *chunkParser) peekBlanks() byte {
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return c
		}
	}
	return 0
}

// chunk reads the top-level object into c; false means "ask encoding/json".
func (p *chunkParser) chunk(c *chunkJSON) bool {
	if p.peek() != '{' {
		return false // null, an array, a scalar, or not JSON: Unmarshal's call
	}
	p.i++
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			p.once(&seen, 1<<0)
			p.text(&c.ID)
		case "model":
			p.once(&seen, 1<<1)
			p.text(&c.Model)
		case "object":
			p.once(&seen, 1<<2)
			p.text(&c.Object)
		case "type":
			p.once(&seen, 1<<3)
			p.text(&c.Type)
		case "delta":
			p.once(&seen, 1<<4)
			p.raw(&c.Delta)
		case "choices":
			p.once(&seen, 1<<5)
			p.choices(c)
		case "usage":
			p.once(&seen, 1<<6)
			c.Usage = p.usage(&c.store)
		case "error":
			p.once(&seen, 1<<7)
			p.raw(&c.Error)
		case "response":
			p.once(&seen, 1<<8)
			c.Response = p.response(&c.store)
		case "status":
			p.once(&seen, 1<<9)
			p.text(&c.Status)
		case "incomplete_details":
			p.once(&seen, 1<<10)
			c.IncompleteDetails = p.reason(&c.store)
		default:
			p.skip()
		}
	}
	if p.peek(); p.i != len(p.b) {
		p.fail() // something after the object
	}
	return !p.bad
}

// once fails on a second occurrence of a key: encoding/json would merge
// it into the first's value, which the scanner does not do.
func (p *chunkParser) once(seen *uint16, bit uint16) {
	if *seen&bit != 0 {
		p.fail()
	}
	*seen |= bit
}

// key reads the key of an object's next member and its colon; ok is false
// at the object's end (its brace consumed) or on failure. The n-th member
// (from 0) must follow a comma unless it is the first. Only lower-case
// ASCII keys without escapes are read here: encoding/json matches keys
// without regard to case (with Unicode folding), so anything else is its
// to match.
func (p *chunkParser) key(n int) (key []byte, ok bool) {
	c := p.peek()
	if c == '}' {
		p.i++
		return nil, false
	}
	if n > 0 {
		if c != ',' {
			p.fail()
			return nil, false
		}
		p.i++
		c = p.peek()
	}
	if c != '"' {
		p.fail()
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch ch := p.b[j]; {
		case ch == '"':
			key = p.b[start:j]
			p.i = j + 1
			if p.peek() != ':' {
				p.fail()
				return nil, false
			}
			p.i++
			return key, true
		case ch == '\\' || ch < 0x20 || ch >= 0x80 || 'A' <= ch && ch <= 'Z':
			p.fail()
			return nil, false
		}
	}
	p.fail()
	return nil, false
}

// text reads a rawText: a string kept as its raw bytes, anything else nil.
func (p *chunkParser) text(dst *rawText) {
	if p.peek() == '"' {
		*dst = p.str()
		return
	}
	p.skip()
	*dst = nil
}

// raw reads a rawJSON: whether the value has content.
func (p *chunkParser) raw(dst *rawJSON) {
	p.peek()
	start := p.i
	p.skip()
	_ = dst.UnmarshalJSON(p.b[start:p.i])
}

// index reads a choice's index by its own UnmarshalJSON, as
// encoding/json would.
func (p *chunkParser) index(dst *choiceIndex) {
	p.peek()
	start := p.i
	p.skip()
	if !p.bad {
		_ = dst.UnmarshalJSON(p.b[start:p.i])
	}
}

// null reads a null.
func (p *chunkParser) null() { p.literal("null") }

// open reads the start of a value decoded into a struct: true at '{'
// (consumed), false for null (consumed); any other value is a type error
// for encoding/json.
func (p *chunkParser) open() bool {
	switch p.peek() {
	case '{':
		p.i++
		return true
	case 'n':
		p.null()
	default:
		p.fail()
	}
	return false
}

func (p *chunkParser) choices(c *chunkJSON) {
	switch p.peek() {
	case 'n':
		p.null()
		c.Choices = nil
		return
	case '[':
		p.i++
	default:
		p.fail()
		return
	}
	c.Choices = c.Choices[:0]
	for n := 0; !p.bad; n++ {
		ch := p.peek()
		if ch == ']' && n == 0 {
			p.i++
			return
		}
		if n > 0 {
			if ch == ']' {
				p.i++
				return
			}
			if ch != ',' {
				p.fail()
				return
			}
			p.i++
		}
		p.choice(c.Choices.next()) // bounded: choiceList
	}
}

func (p *chunkParser) choice(ch *choiceJSON) {
	if !p.open() {
		return // null: the element stays zero
	}
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			return
		}
		switch string(key) {
		case "delta":
			p.once(&seen, 1<<0)
			p.delta(&ch.Delta)
		case "message":
			p.once(&seen, 1<<1)
			p.delta(&ch.Message)
		case "text":
			p.once(&seen, 1<<2)
			p.raw(&ch.Text)
		case "finish_reason":
			p.once(&seen, 1<<3)
			p.text(&ch.FinishReason)
		case "index":
			p.once(&seen, 1<<4)
			p.index(&ch.Index)
		default:
			p.skip()
		}
	}
}

func (p *chunkParser) delta(d *deltaJSON) {
	if !p.open() {
		return
	}
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			return
		}
		var dst *rawJSON
		var bit uint16
		switch string(key) {
		case "content":
			dst, bit = &d.Content, 1<<0
		case "reasoning_content":
			dst, bit = &d.ReasoningContent, 1<<1
		case "reasoning":
			dst, bit = &d.Reasoning, 1<<2
		case "refusal":
			dst, bit = &d.Refusal, 1<<3
		case "tool_calls":
			dst, bit = &d.ToolCalls, 1<<4
		case "function_call":
			dst, bit = &d.FunctionCall, 1<<5
		case "audio":
			p.once(&seen, 1<<6)
			p.peek()
			start := p.i
			if p.skip(); !p.bad {
				_ = d.Audio.UnmarshalJSON(p.b[start:p.i])
			}
			continue
		default:
			p.skip()
			continue
		}
		p.once(&seen, bit)
		p.raw(dst)
	}
}

func (p *chunkParser) usage(st *chunkStore) *usageJSON {
	if !p.open() {
		return nil
	}
	if int(st.nUsage) == len(st.usage) {
		p.fail()
		return nil
	}
	u := &st.usage[st.nUsage]
	st.nUsage++
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			break
		}
		switch string(key) {
		case "prompt_tokens":
			p.once(&seen, 1<<0)
			u.PromptTokens = p.int(st)
		case "completion_tokens":
			p.once(&seen, 1<<1)
			u.CompletionTokens = p.int(st)
		case "input_tokens":
			p.once(&seen, 1<<2)
			u.InputTokens = p.int(st)
		case "output_tokens":
			p.once(&seen, 1<<3)
			u.OutputTokens = p.int(st)
		case "prompt_tokens_details":
			p.once(&seen, 1<<4)
			u.PromptTokensDetails = p.details(st)
		case "input_tokens_details":
			p.once(&seen, 1<<5)
			u.InputTokensDetails = p.details(st)
		default:
			p.skip()
		}
	}
	return u
}

func (p *chunkParser) details(st *chunkStore) *detailsJSON {
	if !p.open() {
		return nil
	}
	if int(st.nDetails) == len(st.details) {
		p.fail()
		return nil
	}
	d := &st.details[st.nDetails]
	st.nDetails++
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			break
		}
		if string(key) == "cached_tokens" {
			p.once(&seen, 1)
			d.CachedTokens = p.int(st)
		} else {
			p.skip()
		}
	}
	return d
}

func (p *chunkParser) response(st *chunkStore) *responseJSON {
	if !p.open() {
		return nil
	}
	r := &st.response
	st.usedResp = true
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			p.once(&seen, 1<<0)
			p.text(&r.ID)
		case "model":
			p.once(&seen, 1<<1)
			p.text(&r.Model)
		case "status":
			p.once(&seen, 1<<2)
			p.text(&r.Status)
		case "incomplete_details":
			p.once(&seen, 1<<3)
			r.IncompleteDetails = p.reason(st)
		case "usage":
			p.once(&seen, 1<<4)
			r.Usage = p.usage(st)
		default:
			p.skip()
		}
	}
	return r
}

func (p *chunkParser) reason(st *chunkStore) *reasonJSON {
	if !p.open() {
		return nil
	}
	if int(st.nReasons) == len(st.reasons) {
		p.fail()
		return nil
	}
	r := &st.reasons[st.nReasons]
	st.nReasons++
	var seen uint16
	for n := 0; !p.bad; n++ {
		key, ok := p.key(n)
		if !ok {
			break
		}
		if string(key) == "reason" {
			p.once(&seen, 1)
			p.text(&r.Reason)
		} else {
			p.skip()
		}
	}
	return r
}

// int reads a *tokenCount: null, or a number (tokenCount's
// UnmarshalJSON makes of it what Unmarshal would). Any other value is left
// to encoding/json.
func (p *chunkParser) int(st *chunkStore) *tokenCount {
	c := p.peek()
	if c == 'n' {
		p.null()
		return nil
	}
	start := p.i
	if _ = p.number(); p.bad || int(st.nInts) == len(st.ints) {
		p.fail()
		return nil
	}
	dst := &st.ints[st.nInts]
	st.nInts++
	*dst = countOf(p.b[start:p.i])
	return dst
}

// parseInt64 parses a JSON integer literal (already validated).
func parseInt64(tok []byte) (int64, bool) {
	neg := tok[0] == '-'
	if neg {
		tok = tok[1:]
	}
	if len(tok) > 19 {
		return 0, false
	}
	var v uint64
	for _, d := range tok {
		v = v*10 + uint64(d-'0')
	}
	switch {
	case neg && v <= 1<<63:
		return int64(-v), true // -2^63 wraps to itself, as it should
	case !neg && v < 1<<63:
		return int64(v), true
	}
	return 0, false
}

// skip reads and validates any value.
func (p *chunkParser) skip() {
	switch c := p.peek(); {
	case c == '"':
		p.str()
	case c == '{':
		p.container('}')
	case c == '[':
		p.container(']')
	case c == '-' || '0' <= c && c <= '9':
		p.number()
	case c == 't':
		p.literal("true")
	case c == 'f':
		p.literal("false")
	case c == 'n':
		p.literal("null")
	default:
		p.fail()
	}
}

// container skips an object (end '}') or an array (end ']') at its opening
// byte.
func (p *chunkParser) container(end byte) {
	p.i++
	if p.depth++; p.depth > maxScanDepth {
		p.fail()
		return
	}
	for n := 0; !p.bad; n++ {
		c := p.peek()
		if c == end {
			p.i++
			p.depth--
			return
		}
		if n > 0 {
			if c != ',' {
				p.fail()
				return
			}
			p.i++
			c = p.peek()
		}
		if end == '}' {
			if c != '"' {
				p.fail()
				return
			}
			p.str()
			if p.peek() != ':' {
				p.fail()
				return
			}
			p.i++
		}
		p.skip()
	}
}

// str reads a string at its opening quote and returns it raw, quotes
// included.
func (p *chunkParser) str() []byte {
	start := p.i
	b := p.b
	for j := start + 1; j < len(b); {
		for j < len(b) && plainByte[b[j]] {
			j++ // the run of bytes that need no look (most of any string)
		}
		if j == len(b) {
			break
		}
		c := b[j]
		switch {
		case c == '"':
			p.i = j + 1
			return b[start:p.i]
		case c == '\\':
			if j+1 >= len(b) {
				p.fail()
				return nil
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					p.fail()
					return nil
				}
				j += 6
			default:
				p.fail()
				return nil
			}
		case c < 0x20:
			p.fail()
			return nil
		default:
			j++
		}
	}
	p.fail()
	return nil
}

// plainByte marks the bytes a string holds as they are: not a quote, a
// backslash or a control character.
var plainByte = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// number reads a number by JSON's grammar and reports whether it is an
// integer (no fraction or exponent).
func (p *chunkParser) number() (integer bool) {
	b, j := p.b, p.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		j = digits(b, j)
	default:
		p.fail()
		return false
	}
	integer = true
	if j < len(b) && b[j] == '.' {
		integer = false
		if j++; j >= len(b) || b[j] < '0' || b[j] > '9' {
			p.fail()
			return false
		}
		j = digits(b, j)
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		integer = false
		if j++; j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			p.fail()
			return false
		}
		j = digits(b, j)
	}
	p.i = j
	return integer
}

func digits(b []byte, j int) int {
	for j < len(b) && '0' <= b[j] && b[j] <= '9' {
		j++
	}
	return j
}

func (p *chunkParser) literal(lit string) {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		p.fail()
		return
	}
	p.i += len(lit)
}
