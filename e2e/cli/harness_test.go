package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/internal/freeport"
)

// root is the repository's root, where the README's commands run.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}()

var (
	binDir   string
	binMu    sync.Mutex
	binBuilt = map[string]string{}
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "llmtrace-cli"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	if code == 0 {
		// The tests' own goroutines (process waiters, producers, HTTP
		// clients) end with them.
		http.DefaultClient.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// build compiles the main package at pkg (relative to the repository root)
// once per test binary and returns the executable.
func build(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binBuilt[pkg]; ok {
		return p
	}
	out := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", pkg, err, b)
	}
	binBuilt[pkg] = out
	return out
}

// envBin names a prebuilt llmtrace to test instead of building one (to
// check that a test fails on an older build).
const envBin = "LLMTRACE_CLI_BIN"

// llmtrace is the built command.
func llmtrace(t testing.TB) string {
	if b := os.Getenv(envBin); b != "" {
		return b
	}
	return build(t, "cmd/llmtrace")
}

// cleanEnv is the environment without any OTEL_* or LLMTRACE_* variable
// (the machine's are not ours), plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "LLMTRACE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// noExport is cleanEnv that exports nothing.
func noExport(extra ...string) []string {
	return cleanEnv(append([]string{"OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none"}, extra...)...)
}

// syncBuffer collects a process's output for a test that reads it while
// the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a started command.
type proc struct {
	t      testing.TB
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// start runs bin with args; the process is killed at the test's end if it
// is still running, and its output is shown when the test failed.
func start(t testing.TB, env []string, dir, bin string, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(bin, args...), env, dir)
}

func startCmd(t testing.TB, cmd *exec.Cmd, env []string, dir string) *proc {
	t.Helper()
	p := &proc{t: t, name: filepath.Base(cmd.Path) + " " + strings.Join(cmd.Args[1:], " "), cmd: cmd,
		stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Env = env
	cmd.Dir = dir
	if cmd.Stdout == nil {
		cmd.Stdout = p.stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.stderr
	}
	// Its own process group, so a `go run` and the program it runs are
	// signalled together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.name, err)
	}
	go func() {
		err := cmd.Wait()
		p.code = exitCode(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s (exit %d)\nstdout:\n%s\nstderr:\n%s", p.name, p.code, tail(p.stdout.String()), tail(p.stderr.String()))
		}
		checkNoPanic(t, p.name, p.stdout.String()+p.stderr.String())
	})
	return p
}

func tail(s string) string {
	if len(s) > 16<<10 {
		return "…" + s[len(s)-16<<10:]
	}
	return s
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return -1
}

var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[running\]:)`)

// checkNoPanic fails t when out shows a Go panic or fatal error.
func checkNoPanic(t testing.TB, name, out string) {
	t.Helper()
	if loc := panicRE.FindStringIndex(out); loc != nil {
		end := min(loc[0]+2000, len(out))
		t.Errorf("%s panicked:\n%s", name, out[loc[0]:end])
	}
}

// signal sends sig to the process's group.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// wait waits for the process to exit and returns its status; it fails the
// test when that takes longer than within.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %v", p.name, within)
		return -1
	}
}

// stop interrupts the process as a user's Ctrl-C does and returns its exit
// status.
func (p *proc) stop() int {
	p.t.Helper()
	p.signal(syscall.SIGINT)
	return p.wait(60 * time.Second)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls cond until it holds; it fails the test after 60 s (a
// loaded CI machine) or when the process exits first.
func (p *proc) waitFor(what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if p.exited() {
			if cond() {
				return
			}
			p.t.Fatalf("%s exited (status %d) before %s; stderr:\n%s", p.name, p.code, what, tail(p.stderr.String()))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s from %s; stderr:\n%s", what, p.name, tail(p.stderr.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStderr waits until stderr contains s.
func (p *proc) waitStderr(s string) {
	p.t.Helper()
	p.waitFor(fmt.Sprintf("%q on stderr", s), func() bool { return strings.Contains(p.stderr.String(), s) })
}

// logValue returns the value of key in the last slog text line whose msg
// is msg, or "".
func logValue(out, msg, key string) string {
	v := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "msg="+msg+" ") && !strings.Contains(line, `msg="`+msg+`" `) && !strings.HasSuffix(line, "msg="+msg) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if k, val, ok := strings.Cut(f, "="); ok && k == key {
				v = strings.Trim(val, `"`)
			}
		}
	}
	return v
}

// logInt is logValue as an integer (-1 when absent).
func logInt(out, msg, key string) int64 {
	n, err := strconv.ParseInt(logValue(out, msg, key), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// run runs bin to its end within two minutes and returns status, stdout and
// stderr.
func run(t testing.TB, env []string, stdin string, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within 2 minutes\n%s", bin, args, e.String())
	}
	checkNoPanic(t, filepath.Base(bin), o.String()+e.String())
	return exitCode(err), o.String(), e.String()
}

// freeAddr is a free loopback TCP address.
func freeAddr(t testing.TB) string { return freeport.Addr(t) }

// shortDir is a temporary directory short enough for Unix socket paths.
func shortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// rssBytes is a process's resident set size.
func rssBytes(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading RSS: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// dialUntil connects to addr (network "unix" or "tcp") until it answers.
func dialUntil(t testing.TB, p *proc, network, addr string) {
	t.Helper()
	p.waitFor("a listener on "+addr, func() bool {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

func execCommand(bin string, args ...string) *exec.Cmd { return exec.Command(bin, args...) }
