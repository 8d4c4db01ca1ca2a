package main

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalDeliveredTwice: timeout(1) sends its signal to the command and
// then to the command's process group, so the command gets it twice
// within microseconds. That is one request to finish, not a second
// signal: the proxy drains the stream it serves, flushes and exits 0,
// rather than at once with 143 and nothing flushed. (A second signal
// later still exits at once: TestLoadInterrupt.)
func TestSignalDeliveredTwice(t *testing.T) {
	bin := loadBinary(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	addrRE := regexp.MustCompile(`listen=(\S+)`)
	for attempt := range 3 {
		cmd := exec.Command(bin, "proxy", "-listen", "127.0.0.1:0", "-upstream", up.URL, "-models", "m", "-stats-log", "0", "-drain", "500ms")
		cmd.Env = append(cleanEnv(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		errw := watch(stderr)
		errw.waitLine(t, "msg=proxying")
		m := addrRE.FindStringSubmatch(errw.String())
		if m == nil {
			t.Fatalf("no address in %s", errw)
		}
		client := &http.Client{Transport: &http.Transport{}}
		resp, err := client.Post("http://"+m[1]+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		// The stream runs: the drain will hold the proxy past both.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-errw.done
		err = cmd.Wait()
		resp.Body.Close()
		client.CloseIdleConnections()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if code != 0 || strings.Contains(errw.String(), "exiting now") {
			t.Fatalf("attempt %d: exit %d, want 0 without \"exiting now\"\n%s", attempt, code, errw)
		}
	}
}
