package openaihttp

// choiceSet is what a stream's chunks said of its choices: which had their
// finish reason, and how many the stream showed. A client that leaves once
// every choice has finished got its whole answer, though the usage chunk
// and [DONE] may not have reached it (many clients stop reading at the
// finish reason); one that leaves while a choice is still streaming
// aborted, whichever others finished.
type choiceSet struct {
	finished [maxChoices / 64]uint64 // by index
	done     int                     // choices finished
	seen     int                     // 1 + the highest index seen
	lost     bool                    // an index the set cannot track: only the stream's end completes it
}

// see notes a choice of a chunk, finished when it carries its finish
// reason.
func (s *choiceSet) see(x choiceIndex, finished bool) {
	i, ok := x.get()
	if !ok {
		s.lost = true
		return
	}
	s.seen = max(s.seen, i+1)
	if w, b := i/64, uint64(1)<<(i%64); finished && s.finished[w]&b == 0 {
		s.finished[w] |= b
		s.done++
	}
}

// all reports whether every choice has finished: the n the request asked
// for, or as many as the stream showed when it showed more.
func (s *choiceSet) all(n int) bool {
	return !s.lost && s.done >= max(n, s.seen, 1)
}
