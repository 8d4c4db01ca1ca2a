package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// loadBinary builds cmd/llmtrace into t's temporary directory: the
// shipped binary, signals and all. (The build cache makes a second build
// a link.)
func loadBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "llmtrace")
	if out, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput(); err != nil {
		t.Fatalf("building llmtrace: %v\n%s", err, out)
	}
	return path
}

// lineWatcher copies a process's output into a buffer and lets a test wait
// for a line.
type lineWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
	done  chan struct{}
}

func watch(r io.Reader) *lineWatcher {
	w := &lineWatcher{lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.mu.Lock()
			w.buf.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
			select {
			case w.lines <- sc.Text():
			default:
			}
		}
	}()
	return w
}

// waitLine waits for a line that contains s.
func (w *lineWatcher) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l := <-w.lines:
			if strings.Contains(l, s) {
				return
			}
		case <-w.done:
			t.Fatalf("output ended without a line containing %q:\n%s", s, w.String())
		case <-timeout:
			t.Fatalf("no line containing %q:\n%s", s, w.String())
		}
	}
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestLoadInterrupt runs the built binary against a backend that accepts
// connections and never answers, with export timeouts longer than the
// 60 s flush (issue 12.8). An interrupt during the flush ends the flush
// and the run: the totals still hold produced = exported + dropped, and
// the status says where the spans did not go. A second interrupt while the
// first is being handled exits at once with status 130.
func TestLoadInterrupt(t *testing.T) {
	bin := loadBinary(t)
	for _, tc := range []struct {
		name  string
		twice bool
	}{
		{name: "one interrupt"},
		{name: "two interrupts", twice: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			silent := startSilent(t)
			cmd := exec.Command(bin, "load", "-endpoint", silent.Addr().String(), "-rate", "200", "-duration", "300ms",
				"-in-flight", "16", "-progress", "50ms")
			cmd.Env = append(cleanEnv(), "OTEL_BSP_EXPORT_TIMEOUT=600000", "OTEL_EXPORTER_OTLP_TIMEOUT=600000")
			stdout, _ := cmd.StdoutPipe()
			stderr, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			out, errw := watch(stdout), watch(stderr)
			// After the window, progress lines offer nothing: the loop
			// has drained and is flushing into the silent backend.
			errw.waitLine(t, "offered 0/s")
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if tc.twice {
				errw.waitLine(t, "finishing")
				time.Sleep(sameSignal + 50*time.Millisecond) // not the first delivered twice
				if err := cmd.Process.Signal(os.Interrupt); err != nil {
					t.Fatal(err)
				}
			}
			waited := make(chan error, 1)
			go func() { <-out.done; <-errw.done; waited <- cmd.Wait() }()
			var err error
			select {
			case err = <-waited:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("load did not exit after the interrupt\nstdout:\n%s\nstderr:\n%s", out, errw)
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					t.Fatalf("killed by %v", ws.Signal())
				}
			}
			t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errw)
			if tc.twice {
				if code != 130 || !strings.Contains(errw.String(), "exiting now") {
					t.Errorf("exit %d after two interrupts, want 130 and \"exiting now\"", code)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			lines := summaryLines(t, out.String())
			if len(lines) != 2 {
				t.Fatalf("%d summary lines, want the level and the total", len(lines))
			}
			if lines[0]["interrupted"] != "true" || num(t, lines[0], "pending") == 0 {
				t.Errorf("level %v: want interrupted with spans pending", lines[0])
			}
			total := lines[1]
			p, e, d := num(t, total, "produced"), num(t, total, "exported"), num(t, total, "dropped")
			if p == 0 || p != e+d || e != 0 {
				t.Errorf("total produced %d exported %d dropped %d; want all dropped, produced = exported + dropped", p, e, d)
			}
			if !strings.Contains(errw.String(), "traces: 0 of ") {
				t.Errorf("stderr lacks the export status")
			}
		})
	}
}

// cleanEnv is the test process's environment without OTEL_* and
// LLMTRACE_* (TestMain sets some), for a child command.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "LLMTRACE_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestLoadBinaryFlags runs the built binary with every flag load has,
// against an OTLP/HTTP receiver configured through the environment.
func TestLoadBinaryFlags(t *testing.T) {
	bin := loadBinary(t)
	srv, exports := otlpHTTPReceiver(t, 200)
	for _, tc := range []struct {
		name  string
		args  []string
		lines int // summary lines: levels, max, total
		code  int
	}{
		{"flat out", []string{"-rate", "0", "-duration", "200ms", "-in-flight", "8", "-prompt-tokens", "4", "-output-tokens", "3",
			"-max-waiting", "64", "-progress", "100ms"}, 2, 0},
		{"find-max", []string{"-find-max", "-levels", "2", "-rate", "300", "-duration", "200ms", "-step-time", "2ms", "-progress", "0"}, 4, 0},
		{"help", []string{"-h"}, 0, 0},
		{"bad flag value", []string{"-in-flight", "0"}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"load"}, tc.args...)...)
			cmd.Env = append(cleanEnv(), "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_BSP_SCHEDULE_DELAY=20")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr:\n%s", code, tc.code, stderr.String())
			}
			if tc.code != 0 || tc.lines == 0 {
				if !strings.Contains(stderr.String(), "usage: llmtrace load") && !strings.Contains(stderr.String(), "-in-flight") {
					t.Errorf("stderr does not say what is wrong:\n%s", stderr.String())
				}
				return
			}
			lines := summaryLines(t, stdout.String())
			if len(lines) != tc.lines {
				t.Fatalf("%d summary lines, want %d:\n%s", len(lines), tc.lines, stdout.String())
			}
			total := lines[len(lines)-1]
			// Flat out overflows the queue on purpose: what counts is that
			// every span is accounted for.
			if p, e, d := num(t, total, "produced"), num(t, total, "exported"), num(t, total, "dropped"); p == 0 || e == 0 || p != e+d {
				t.Errorf("total %v: want produced = exported + dropped, some exported", total)
			}
			if tc.name == "flat out" && (lines[0]["in_flight"] != "8" || lines[0]["rate"] != "0.0") {
				t.Errorf("level %v", lines[0])
			}
		})
	}
	if exports.Load() == 0 {
		t.Error("the receiver saw no export")
	}
}
