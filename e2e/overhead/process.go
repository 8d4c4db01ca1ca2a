package overhead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is one process of the stack, serving on URL, its runtime figures
// on Debug (a -debug-listen address).
type Process struct {
	Name, URL, Debug string
	LogPath          string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// StartProcess runs bin with args and env (added to this process's
// environment without its OTEL_* and LLMTRACE_* variables), its output to
// a log file in logDir, and waits until ready answers 200.
func StartProcess(ctx context.Context, name, bin string, args, env []string, logDir, url, debug, ready string) (*Process, error) {
	p := &Process{Name: name, URL: url, Debug: debug, exited: make(chan struct{})}
	log, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	p.LogPath = log.Name()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.Env = append(Environ(), env...)
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, err
	}
	_ = log.Close()
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(ctx, ready); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%s: %w (log %s: %s)", name, err, p.LogPath, logTail(p.LogPath))
	}
	return p, nil
}

// logTail is the end of a process's log, for an error that outlives the
// test's temporary directory.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b[max(len(b)-1024, 0):]))
}

// Environ is this process's environment without the variables the stack's
// processes get from their configuration.
func Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "LLMTRACE_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *Process) waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s: %w", url, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM — the process drains, flushes its telemetry and exits
// — and waits for it, killing it after timeout.
func (p *Process) Stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM", p.Name, timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return fmt.Errorf("%s: %w (log %s)", p.Name, p.err, p.LogPath)
	}
	return nil
}

// Kill ends the process at once and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Vars are a process's runtime figures, from its /debug/vars.
type Vars struct {
	Memstats struct {
		Mallocs, TotalAlloc, HeapInuse uint64
		NumGC                          uint32
	} `json:"memstats"`
	Process struct {
		CPUSeconds  float64 `json:"cpu_seconds"`
		MaxRSSBytes int64   `json:"max_rss_bytes"`
	} `json:"process"`
}

// Vars reads the process's runtime figures.
func (p *Process) Vars() (Vars, error) {
	var v Vars
	resp, err := http.Get("http://" + p.Debug + "/debug/vars")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&v)
	if err == nil && v.Memstats.Mallocs == 0 {
		err = fmt.Errorf("%s: no memstats in /debug/vars", p.Name)
	}
	return v, err
}

// FreeAddr is a loopback address nobody listens on, for a process to take.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
