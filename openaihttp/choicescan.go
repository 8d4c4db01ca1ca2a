package openaihttp

// choiceScan reads the finish reasons of a response's choices as their
// bytes go by, holding one choice's reason at a time: what the layer needs
// of choices longer than it keeps (WithEventLimit), such as a long
// completion or its logprobs. The fieldScanner of the response feeds it
// the bytes of the choices' value (fieldScanner.tap).
type choiceScan struct {
	el   fieldScanner // the choice being read
	st   choiceScanState
	last []byte // the raw finish reason of the last choice that had one
}

type choiceScanState uint8

const (
	choicesStart choiceScanState = iota // before '['
	choicesElem                         // before a choice or ']'
	choicesIn                           // inside a choice
	choicesAfter                        // after a choice
	choicesEnd                          // read, or not an array of objects
)

// choiceFields is what choiceScan keeps of a choice.
var choiceFields = &fieldSet{keys: []string{"finish_reason"}, caps: []int{1<<10 + 2}}

func newChoiceScan(h *hold) *choiceScan {
	cs := &choiceScan{}
	cs.el.init(choiceFields, h)
	return cs
}

// reset starts over, for a later duplicate of the choices' key.
func (cs *choiceScan) reset() {
	cs.st, cs.last = choicesStart, cs.last[:0]
}

// feed reads the next bytes of the choices' value.
func (cs *choiceScan) feed(p []byte) {
	for len(p) > 0 && cs.st != choicesEnd {
		if cs.st == choicesIn {
			if cs.el.stopped {
				cs.st = choicesEnd
				break
			}
			p = cs.el.feedRest(p)
			switch {
			case cs.el.done:
				if raw, _ := cs.el.value(0); len(raw) > 2 && raw[0] == '"' {
					cs.last = append(cs.last[:0], raw...)
				}
				cs.st = choicesAfter
			case cs.el.bad:
				cs.st = choicesEnd
			}
			continue
		}
		c := p[0]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			p = p[1:]
			continue
		}
		switch {
		case cs.st == choicesStart && c == '[', cs.st == choicesAfter && c == ',':
			cs.st = choicesElem
			p = p[1:]
		case cs.st == choicesElem && c == '{':
			cs.el.reset()
			cs.st = choicesIn // the choice's scanner reads its brace
		case cs.st != choicesStart && c == ']':
			cs.st = choicesEnd
		default:
			cs.st = choicesEnd // null, or not the choices servers send
		}
	}
}

// reason returns the raw JSON of the last finish reason read, or nil.
func (cs *choiceScan) reason() []byte {
	if len(cs.last) == 0 {
		return nil
	}
	return cs.last
}

// release gives back what the scan holds.
func (cs *choiceScan) release() { cs.el.release() }
