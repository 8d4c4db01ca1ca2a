package lineout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	defer w.Close(context.Background())
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
	for deadline := time.Now().Add(20 * time.Second); b.Len() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the line was not written without a delay")
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("y\n")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestErrorsAreKept(t *testing.T) {
	w := New(failing{}, false, -1)
	if _, err := w.Write([]byte("x\n")); err != nil {
		t.Fatalf("the first Write failed before the file was written: %v", err)
	}
	if err := w.Flush(context.Background()); err == nil || err.Error() != "disk full" {
		t.Fatalf("Flush = %v", err)
	}
	if _, err := w.Write([]byte("y\n")); err == nil {
		t.Error("a Write after the failure succeeded")
	}
	if err := w.Close(context.Background()); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close = %v", err)
	}
}

// stalled is a reader that stopped reading: its Write blocks until
// released.
type stalled struct{ release chan struct{} }

func (s stalled) Write(p []byte) (int, error) { <-s.release; return len(p), nil }

// TestStalledReaderNeverBlocksWrites: a file nobody drains (a full pipe, a
// FIFO) costs dropped lines, counted, never a blocked Write; Close honours
// its context. What -stats-out's callers, the goroutines finishing
// requests, need.
func TestStalledReaderNeverBlocksWrites(t *testing.T) {
	s := stalled{release: make(chan struct{})}
	w := New(s, false, -1)
	line := bytes.Repeat([]byte("x"), 1023)
	line = append(line, '\n')
	const n = 3 * MaxPending / 1024 // three times what may wait
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			if _, err := w.Write(line); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Write blocked on a stalled reader")
	}
	if d := w.Dropped(); d < n/2 {
		t.Errorf("dropped %d of %d lines, want at least %d", d, n, n/2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close on a stalled reader = %v, want the context's error", err)
	}
	close(s.release) // the reader resumes: the goroutine writes what waits and ends
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("Close after the reader resumed = %v", err)
	}
}

// TestCloseWritesWhatWaits: lines written just before Close reach the
// file, whatever the delay.
func TestCloseWritesWhatWaits(t *testing.T) {
	var b safeBuffer
	w := New(&b, false, time.Hour)
	for range 100 {
		w.Write([]byte("line\n"))
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 500 {
		t.Fatalf("%d bytes written, want 500", b.Len())
	}
}

var _ io.Writer = (*Writer)(nil)

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
	if err := w.Close(context.Background()); err != nil {
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

// gated holds its first block until open is closed: a file that lags
// behind a burst.
type gated struct {
	open  chan struct{}
	mu    sync.Mutex
	lines int
}

func (g *gated) Write(p []byte) (int, error) {
	<-g.open
	g.mu.Lock()
	g.lines += bytes.Count(p, []byte{'\n'})
	g.mu.Unlock()
	return len(p), nil
}

// TestWaitWhenFullKeepsABurst: at a command's exit the requests in flight
// all end at once; with WaitWhenFull their lines wait for a file that lags
// instead of being dropped, and Close writes them all. Without it the same
// burst drops lines, counted.
func TestWaitWhenFullKeepsABurst(t *testing.T) {
	const n = 4 * MaxPending / 1024
	for _, patient := range []bool{false, true} {
		t.Run(fmt.Sprintf("patient=%v", patient), func(t *testing.T) {
			g := &gated{open: make(chan struct{})}
			w := New(g, false, 0)
			if patient {
				w.WaitWhenFull(context.Background())
			}
			// The file opens once twice what may wait has been offered,
			// which only a writer that drops gets to, or, for the patient
			// one, after 100 ms.
			var offered atomic.Int64
			wait := time.Minute
			if patient {
				wait = 100 * time.Millisecond
			}
			go func() {
				defer close(g.open)
				for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(time.Millisecond) {
					if offered.Load() >= 2*MaxPending/1024 {
						return
					}
				}
			}()
			line := append(bytes.Repeat([]byte("x"), 1023), '\n')
			for range n {
				if _, err := w.Write(line); err != nil {
					t.Fatal(err)
				}
				offered.Add(1)
			}
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			g.mu.Lock()
			got := g.lines
			g.mu.Unlock()
			switch d := w.Dropped(); {
			case patient && (d != 0 || got != n):
				t.Errorf("waiting for the file: %d of %d lines written, %d dropped", got, n, d)
			case !patient && (d == 0 || int64(got)+d != n):
				t.Errorf("not waiting: %d written and %d dropped of %d, want some dropped and none lost uncounted", got, d, n)
			}
		})
	}
}

// TestWaitWhenFullEndsWithItsContext: a stalled file holds a waiting
// Write only until WaitWhenFull's context ends; from then on lines are
// dropped and counted again, and no Write blocks.
func TestWaitWhenFullEndsWithItsContext(t *testing.T) {
	s := stalled{release: make(chan struct{})}
	defer close(s.release)
	w := New(s, false, -1)
	ctx, cancel := context.WithCancel(context.Background())
	w.WaitWhenFull(ctx)
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 3 * MaxPending / 1024 {
			if _, err := w.Write(line); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
		t.Fatal("every Write returned on a stalled file while waiting was asked for")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Writes still blocked after WaitWhenFull's context ended")
	}
	if w.Dropped() == 0 {
		t.Error("no line dropped on a stalled file once the wait ended")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer ccancel()
	_ = w.Close(cctx)
}
