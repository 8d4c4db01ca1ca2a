// Package testbackend runs real observability backends (Jaeger v2 and
// Prometheus) as child processes for llmtrace's tests, and reads back what
// the library exported through their query APIs.
//
// Binaries are found through environment variables that scripts/test.sh
// exports (see the Env* constants). When a binary is missing a test is
// skipped with a hint to run `bash scripts/test.sh`, except under CI (env CI
// set), where a missing backend is a test failure: a green CI run must have
// really exercised the backends.
//
// Everything listens on 127.0.0.1 on ports picked free at start, so tests in
// different packages (which `go test ./...` runs in parallel) never collide.
package testbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvJaegerBin is the path of a Jaeger v2 binary (built by
	// scripts/build-jaeger.sh). When unset, the script's cache path is tried.
	EnvJaegerBin = "LLMTRACE_JAEGER_BIN"
	// EnvPrometheusBin is the path of a prometheus binary. When unset,
	// "prometheus" is looked up in PATH.
	EnvPrometheusBin = "LLMTRACE_PROMETHEUS_BIN"
	// EnvChromiumBin is the path of a chromium binary for headless
	// screenshots; see ChromiumBin.
	EnvChromiumBin = "LLMTRACE_CHROMIUM_BIN"
	// EnvCacheDir overrides the cache directory scripts/build-jaeger.sh
	// builds into; default ${XDG_CACHE_HOME:-$HOME/.cache}/llmtrace.
	EnvCacheDir = "LLMTRACE_CACHE_DIR"
	// EnvCI, when non-empty, turns a missing backend from a skip into a
	// failure.
	EnvCI = "CI"
)

// JaegerVersion is the version of github.com/jaegertracing/jaeger pinned in
// tools/go.mod; scripts/build-jaeger.sh names the cached binary after it. A
// test keeps the two in step.
const JaegerVersion = "v1.76.0"

const howToRun = "run the tests through `bash scripts/test.sh`, which installs and builds the backends"

// startTimeout bounds how long a backend may take to become ready. Cold
// starts under -race on a loaded 2-core machine are far slower than the
// ~1 s seen on an idle one.
const startTimeout = 60 * time.Second

// stopTimeout is how long a backend gets to exit after SIGTERM before it is
// killed.
const stopTimeout = 10 * time.Second

// CacheDir returns the directory scripts/build-jaeger.sh caches binaries in.
func CacheDir() string {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "llmtrace")
}

// JaegerBin returns the Jaeger binary to run: $LLMTRACE_JAEGER_BIN, else the
// cache path of scripts/build-jaeger.sh. The error says why none is usable.
func JaegerBin() (string, error) {
	if p := os.Getenv(EnvJaegerBin); p != "" {
		return checkExecutable(p, EnvJaegerBin)
	}
	dir := CacheDir()
	if dir == "" {
		return "", fmt.Errorf("%s is not set and no cache directory is known ($HOME unset)", EnvJaegerBin)
	}
	p := filepath.Join(dir, "jaeger-"+JaegerVersion)
	if _, err := checkExecutable(p, ""); err != nil {
		return "", fmt.Errorf("%s is not set and no Jaeger binary at %s (build it with `bash scripts/build-jaeger.sh`)", EnvJaegerBin, p)
	}
	return p, nil
}

// PrometheusBin returns the prometheus binary to run: $LLMTRACE_PROMETHEUS_BIN,
// else "prometheus" from PATH.
func PrometheusBin() (string, error) {
	return binFromEnvOrPath(EnvPrometheusBin, "prometheus")
}

// ChromiumBin returns the chromium binary for headless screenshots:
// $LLMTRACE_CHROMIUM_BIN, else "chromium" from PATH.
func ChromiumBin() (string, error) {
	return binFromEnvOrPath(EnvChromiumBin, "chromium")
}

// RequireChromium returns the chromium binary, or skips t (fails it under CI)
// when there is none.
func RequireChromium(t testing.TB) string {
	t.Helper()
	p, err := ChromiumBin()
	requireBinary(t, "chromium", err)
	return p
}

func binFromEnvOrPath(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return checkExecutable(p, env)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not set and %q is not in PATH", env, name)
	}
	return p, nil
}

func checkExecutable(p, env string) (string, error) {
	fi, err := os.Stat(p)
	if err == nil && (fi.IsDir() || fi.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		if env != "" {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return "", err
	}
	return p, nil
}

// requireBinary skips t when err is non-nil, or fails it under CI.
func requireBinary(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(EnvCI) != "" {
		t.Fatalf("testbackend: %s is required when %s is set: %v; %s", what, EnvCI, err, howToRun)
	}
	t.Skipf("testbackend: skipping, no %s: %v; %s", what, err, howToRun)
}

// process is one run-and-stop-able child process whose output is appended to
// a log file that survives restarts.
type process struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has been waited for
	waitErr error
}

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== testbackend: starting %s %s\n", p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	logf.Close() // the child holds its own copy
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// exited returns a channel closed when the current run has exited.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// stop sends SIGTERM, waits up to stopTimeout, then kills, and always waits
// for the process to be reaped. Stopping a stopped process is a no-op.
func (p *process) stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-done:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-done
		err = fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.name, stopTimeout)
	}
	p.mu.Lock()
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	return err
}

// exitError describes how the current run ended, for messages.
func (p *process) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waitErr != nil {
		return p.waitErr
	}
	return errors.New("exited with status 0")
}

// logTail returns up to the last max bytes of the log.
func (p *process) logTail(max int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := int64(0)
	if fi.Size() > max {
		off = fi.Size() - max
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	s := string(b)
	if off > 0 {
		s = "…" + s
	}
	return s
}

// registerLogOnFailure shows the process log when t has failed.
func (p *process) registerLogOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testbackend: %s log (%s):\n%s", p.name, p.logPath, p.logTail(32<<10))
		}
	})
}

// childEnv returns the environment for a backend: ours minus variables that
// would change its behaviour behind the test's back (OTel SDK settings, e.g.
// OTEL_EXPORTER_OTLP_ENDPOINT that Jaeger would trace itself into), plus
// extra.
func childEnv(dropPrefixes []string, extra ...string) []string {
	var env []string
outer:
	for _, kv := range os.Environ() {
		for _, pre := range dropPrefixes {
			if strings.HasPrefix(kv, pre) {
				continue outer
			}
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// waitReady polls url until it answers 200, the process exits, or ctx ends.
// Each connection to the addresses in alsoDial must succeed too.
func waitReady(ctx context.Context, p *process, url string, alsoDial ...string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	exited := p.exited()
	delay := 10 * time.Millisecond
	var last error
	for {
		last = probe(ctx, client, url, alsoDial)
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before becoming ready: %v", p.name, p.exitError())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last probe: %v)", p.name, context.Cause(ctx), last)
		case <-time.After(delay):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

func probe(ctx context.Context, client *http.Client, url string, alsoDial []string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var d net.Dialer
	for _, addr := range alsoDial {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}

// startContext is the context for waiting on a backend start: t's context
// where there is one, bounded by startTimeout.
func startContext(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(t.Context(), startTimeout,
		fmt.Errorf("backend not ready within %v", startTimeout))
}
