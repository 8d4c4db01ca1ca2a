package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/llmtrace/llmtrace/internal/lineout"
	"github.com/llmtrace/llmtrace/otelstats"
)

// statsSink writes one RequestStats JSON object per line (-stats-out), for
// the goroutines that finish requests. Lines reach the file within a
// second (lineout), so a long-running server's output can be tailed, and a
// reader that stops reading costs dropped lines, never a blocked request.
type statsSink struct {
	mu  sync.Mutex
	w   *lineout.Writer
	buf []byte
}

// openStatsSink writes to the file name, or to stdout for "-"; lines are
// flushed one by one with flushEach, else within a second.
func openStatsSink(name string, stdout io.Writer, flushEach bool) (*statsSink, error) {
	delay := lineout.FlushDelay
	if flushEach {
		delay = -1
	}
	if name == "-" {
		return &statsSink{w: lineout.New(stdout, false, delay)}, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	return &statsSink{w: lineout.New(f, true, delay)}, nil
}

func (s *statsSink) write(st *otelstats.RequestStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(st.AppendJSON(s.buf[:0]), '\n')
	_, _ = s.w.Write(s.buf)
}

// waitWhenFull has writes wait for the file, not drop lines, until ctx
// ends (lineout.Writer.WaitWhenFull). A nil sink does nothing.
func (s *statsSink) waitWhenFull(ctx context.Context) {
	if s != nil {
		s.w.WaitWhenFull(ctx)
	}
}

// close writes what waits and closes the file (stdout stays open), within
// ctx; lines the reader did not take in time are reported.
func (s *statsSink) close(ctx context.Context) error {
	err := s.w.Close(ctx)
	if n := s.w.Dropped(); n > 0 && err == nil {
		err = fmt.Errorf("%d lines dropped: the reader did not keep up", n)
	}
	return err
}

// sameFile reports whether -stats-out and -spans-out name one file: each
// opens, truncates and writes its own, so the two would overwrite each
// other's lines. "-" (both on stdout, line by line) is allowed.
func sameFile(a, b string) bool {
	if a == "" || b == "" || a == "-" || b == "-" {
		return false
	}
	if fa, err := os.Stat(a); err == nil {
		if fb, err := os.Stat(b); err == nil {
			return os.SameFile(fa, fb)
		}
	}
	aa, errA := filepath.Abs(a)
	bb, errB := filepath.Abs(b)
	return errA == nil && errB == nil && aa == bb
}
