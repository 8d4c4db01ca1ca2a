package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestProxyStdoutClosed: `llmtrace proxy -stats-out -` whose reader goes
// away (`| head -1`, a log shipper restarting) keeps serving: the write to
// the broken pipe is an error, reported at exit, not the SIGPIPE that
// killed the process and every stream in flight with it.
func TestProxyStdoutClosed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"toy\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := execCommand(llmtrace(t), "proxy", "-upstream", up.URL, "-listen", addr, "-models", "toy",
		"-stats-log", "0", "-stats-out", "-")
	cmd.Stdout = w
	p := startCmd(t, cmd, noExport(), root)
	w.Close()
	r.Close() // the reader is gone before the first line
	p.waitStderr("msg=proxying")
	for i := range 5 {
		if code := post(t, "http://"+addr+"/v1/chat/completions", "application/json", []byte(chatBody)); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if p.exited() {
		t.Fatalf("the proxy died (exit %d)", p.code)
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if !strings.Contains(p.stderr.String(), "broken pipe") {
		t.Errorf("the lost lines are not reported:\n%s", p.stderr.String())
	}
}
