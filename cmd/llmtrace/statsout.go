package main

import (
	"bufio"
	"io"
	"os"
	"sync"

	"github.com/llmtrace/llmtrace/otelstats"
)

// statsSink writes one RequestStats JSON object per line (-stats-out), for
// the goroutines that finish requests.
type statsSink struct {
	mu        sync.Mutex
	w         *bufio.Writer
	f         *os.File // nil when writing to stdout
	buf       []byte
	flushEach bool // a long-running server's readers tail the file
}

// openStatsSink writes to the file name, or to stdout for "-".
func openStatsSink(name string, stdout io.Writer, flushEach bool) (*statsSink, error) {
	s := &statsSink{flushEach: flushEach}
	w := stdout
	if name != "-" {
		f, err := os.Create(name)
		if err != nil {
			return nil, err
		}
		s.f, w = f, f
	}
	s.w = bufio.NewWriter(w)
	return s, nil
}

func (s *statsSink) write(st *otelstats.RequestStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(st.AppendJSON(s.buf[:0]), '\n')
	_, _ = s.w.Write(s.buf)
	if s.flushEach {
		_ = s.w.Flush()
	}
}

// close flushes and closes the file (stdout stays open).
func (s *statsSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.w.Flush()
	if s.f != nil {
		if cerr := s.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
