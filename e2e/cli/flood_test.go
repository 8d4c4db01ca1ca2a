package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/transport"
)

// envFlood turns the test binary into a flooder (see flood): "ADDR N C T"
// opens N TCP connections to ADDR, C dialling at once with timeout T, and
// holds them until stdin closes.
const envFlood = "LLMTRACE_CLI_FLOOD"

func init() {
	if v := os.Getenv(envFlood); v != "" {
		os.Exit(flood(v))
	}
}

// flood opens connections, prints "dialed OK FAILED" and holds them until
// stdin ends. A connection the collector closes stays counted as dialed:
// the flooder never knows.
func flood(spec string) int {
	var addr, ts string
	var n, conc int
	_, err := fmt.Sscanf(spec, "%s %d %d %s", &addr, &n, &conc, &ts)
	timeout, terr := time.ParseDuration(ts)
	if err != nil || terr != nil {
		fmt.Println("bad flood spec:", spec, err, terr)
		return 2
	}
	var ok, failed atomic.Int64
	conns := make(chan net.Conn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, timeout)
			if err != nil {
				failed.Add(1)
				return
			}
			ok.Add(1)
			conns <- c
		}()
	}
	wg.Wait()
	fmt.Printf("dialed %d %d\n", ok.Load(), failed.Load())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	close(conns)
	for c := range conns {
		c.Close()
	}
	return 0
}

// flooder is a child process holding connections.
type flooder struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	out   *syncBuffer
}

func startFlooder(t *testing.T, addr string, n, conc int, timeout time.Duration) *flooder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %v", envFlood, addr, n, conc, timeout))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &flooder{cmd: cmd, stdin: w, out: out}
	t.Cleanup(f.stop)
	return f
}

// dialed waits for the flooder's report.
func (f *flooder) dialed(t *testing.T) (ok, failed int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(f.out.String(), "dialed ") {
		if time.Now().After(deadline) {
			t.Fatalf("flooder did not finish dialling: %s", f.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Sscanf(f.out.String()[strings.Index(f.out.String(), "dialed "):], "dialed %d %d", &ok, &failed)
	return ok, failed
}

func (f *flooder) stop() {
	if f.stdin != nil {
		f.stdin.Close()
		f.stdin = nil
		_ = f.cmd.Wait()
	}
}

// TestCollectFlood: 20,000 connections (two flooders of 10,000, as one
// process could not hold them all) against collect at its connection cap,
// and again with a file-descriptor limit below the cap so accepting fails
// with EMFILE (which ended collect). collect never exits, holds no more
// than its cap, counts what it refused, and once the flood is gone a real
// producer's request is recorded. The held connections and the RSS under
// the flood are logged (the README's reliability section quotes them).
func TestCollectFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("the flood takes a minute")
	}
	for _, tc := range []struct {
		name     string
		nofile   int // collect's file-descriptor limit
		maxConns int
		// At the fd limit the listen backlog fills and the kernel drops
		// further SYNs: the flooders then dial many at once, each giving up
		// after a second, instead of waiting out SYN retries.
		conc    int
		timeout time.Duration
	}{
		{"at the default cap", 4096, 0, 64, 10 * time.Second},
		{"at the fd limit", 512, 1024, 512, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rl syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
				t.Fatal(err)
			}
			tc.nofile = int(min(uint64(tc.nofile), rl.Max))
			stats := filepath.Join(t.TempDir(), "stats.jsonl")
			// ulimit in the child's shell, then exec: collect itself runs at
			// that limit (Go raises its soft limit only up to the hard one).
			sh := fmt.Sprintf("ulimit -n %d && exec %s collect -listen tcp:127.0.0.1:0 -stats-out %s -stats-log 0 -idle-timeout 1h",
				tc.nofile, llmtrace(t), stats)
			if tc.maxConns == 0 {
				tc.maxConns = transport.DefaultMaxConns
			} else {
				sh += fmt.Sprintf(" -max-conns %d", tc.maxConns)
			}
			c := &collector{proc: start(t, noExport(), root, "bash", "-c", sh), stats: stats}
			c.waitStderr("msg=listening")
			addr := c.listenAddr("tcp")
			pid := c.cmd.Process.Pid
			baseFDs, baseRSS := openFDs(pid), rssBytes(t, pid)

			// Each flooder holds its connections in one process: at most its
			// hard fd limit (20,000 here; a smaller CI machine floods less
			// and says so).
			per := int(min(10_000, rl.Max-64))
			if per < 10_000 {
				t.Logf("the fd limit is %d: flooding with %d connections, not 20,000", rl.Max, 2*per)
			}
			f1, f2 := startFlooder(t, addr, per, tc.conc, tc.timeout), startFlooder(t, addr, per, tc.conc, tc.timeout)
			ok1, failed1 := f1.dialed(t)
			ok2, failed2 := f2.dialed(t)
			// Let the collector work through its backlog.
			var held, peakFDs int
			c.waitFor("the backlog to be worked through", func() bool {
				fds := openFDs(pid)
				peakFDs = max(peakFDs, fds)
				time.Sleep(200 * time.Millisecond)
				again := openFDs(pid)
				held = again - baseFDs
				return again == fds
			})
			rss := rssBytes(t, pid)
			if c.exited() {
				t.Fatalf("collect exited under the flood (status %d)", c.code)
			}
			if tc.maxConns < tc.nofile {
				// The flood's connections never speak: a producer that
				// comes now takes the oldest one's slot and is recorded.
				produce(t, producerConfig("tcp:"+addr), "during-flood")
				checkComplete(t, "during-flood", c.waitStats("during-flood")["during-flood"])
			}
			limit := min(tc.maxConns, tc.nofile)
			if held > limit || peakFDs > tc.nofile {
				t.Errorf("collect holds %d connections (peak fds %d); its cap is %d, fd limit %d", held, peakFDs, tc.maxConns, tc.nofile)
			}
			t.Logf("flood: %d+%d dialed (%d+%d failed); collect holds %d connections (cap %d, fd limit %d); RSS %.1f MiB (%.1f MiB before)",
				ok1, ok2, failed1, failed2, held, tc.maxConns, tc.nofile, float64(rss)/(1<<20), float64(baseRSS)/(1<<20))

			f1.stop()
			f2.stop()
			c.waitFor("the flood's connections to close", func() bool { return openFDs(pid) <= baseFDs+2 })
			produce(t, producerConfig("tcp:"+addr), "after-flood")
			checkComplete(t, "after-flood", c.waitStats("after-flood")["after-flood"])
			n := c.stopped()
			t.Logf("collect's counters: refused %d, evicted %d, accept errors %d, streams %d", n["refused"], n["evicted"],
				n["accept_errors"], n["streams"])
			if closed := n["refused"] + n["evicted"]; tc.maxConns < tc.nofile && closed < int64(ok1+ok2-tc.maxConns) {
				t.Errorf("refused %d and evicted %d, want at least %d together", n["refused"], n["evicted"], ok1+ok2-tc.maxConns)
			}
			if tc.nofile < tc.maxConns && n["accept_errors"] == 0 {
				t.Errorf("no accept error counted at the fd limit")
			}
		})
	}
}
