package lineout

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLinesReachTheFileWithoutClose: a line written and never followed by
// another reaches the file by itself — what a reader tailing -stats-out of
// a long-running collector needs.
func TestLinesReachTheFileWithoutClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := New(f, true, 20*time.Millisecond)
	defer w.Close()
	if _, err := w.Write([]byte("{\"a\":1}\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, _ := os.ReadFile(path)
		if string(b) == "{\"a\":1}\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the line never reached the file (have %q)", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// And again after the first flush: the timer re-arms.
	w.Write([]byte("{\"b\":2}\n"))
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, _ := os.ReadFile(path)
		if bytes.Count(b, []byte("\n")) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second line never reached the file (have %q)", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// safeBuffer is a bytes.Buffer a timer goroutine and the test can share.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

func TestEveryWriteFlushesWhenNegative(t *testing.T) {
	var b safeBuffer
	w := New(&b, false, -1)
	w.Write([]byte("x\n"))
	if b.Len() != 2 {
		t.Fatalf("buffered %d bytes were not flushed", 2-b.Len())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("y\n")); err == nil {
		t.Error("Write after Close succeeded")
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestErrorsAreKept(t *testing.T) {
	w := New(failing{}, false, -1)
	if _, err := w.Write([]byte("x\n")); err == nil {
		t.Fatal("no error from a failing writer")
	}
	if err := w.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close = %v", err)
	}
}

func TestConcurrentWritesStayWholeLines(t *testing.T) {
	var b safeBuffer
	w := New(&b, false, time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				w.Write([]byte("0123456789abcdef\n"))
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSuffix(b.b.Bytes(), []byte("\n")), []byte("\n")) {
		if string(line) != "0123456789abcdef" {
			t.Fatalf("torn line %q", line)
		}
	}
	if n := bytes.Count(b.b.Bytes(), []byte("\n")); n != 4000 {
		t.Fatalf("%d lines, want 4000", n)
	}
}
