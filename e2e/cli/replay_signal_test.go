package cli

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReplayInterrupted: `tail -f log | llmtrace replay -` stopped with
// Ctrl-C while it waits for more of the pipe ends as at the log's end —
// what was read is flushed, printed and summed up — instead of dying with
// the stats lines still buffered and the spans unexported.
func TestReplayInterrupted(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := execCommand(llmtrace(t), "replay", "-")
	cmd.Stdin = r
	p := startCmd(t, cmd, noExport(), root)
	r.Close()
	// The malformed last line is reported as soon as it is read, so once
	// stderr names it every line before it has been recorded.
	if _, err := io.WriteString(w, updateLog+"{not json\n"); err != nil {
		t.Fatal(err)
	}
	p.waitStderr("line 14:")
	p.signal(syscall.SIGINT)
	if code := p.wait(60 * time.Second); code != 3 { // a line was rejected
		t.Errorf("exit %d, want 3 (one rejected line)\nstderr:\n%s", code, p.stderr.String())
	}
	out, errOut := p.stdout.String(), p.stderr.String()
	for _, id := range []string{`"request_id":"r1"`, `"request_id":"r2"`} {
		if !strings.Contains(out, id) {
			t.Errorf("no stats for %s after the interrupt:\n%s", id, out)
		}
	}
	for _, want := range []string{"interrupted", "TTFT", "1 update(s) rejected"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestReplayStdoutClosed: `llmtrace replay log | head -1` whose reader
// goes away loses the stats lines, not the process: no SIGPIPE (141), the
// summary is printed and the status says the output failed.
func TestReplayStdoutClosed(t *testing.T) {
	log := filepath.Join(t.TempDir(), "updates.jsonl")
	// Enough lines that stdout is written after its reader left.
	if err := os.WriteFile(log, []byte(updateLog+manyRequests(2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := execCommand(llmtrace(t), "replay", log)
	cmd.Stdout = w
	p := startCmd(t, cmd, noExport(), root)
	w.Close()
	r.Close()
	if code := p.wait(60 * time.Second); code != 1 {
		t.Errorf("exit %d, want 1 (stdout failed)\nstderr:\n%s", code, p.stderr.String())
	}
	for _, want := range []string{"broken pipe", "TTFT"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, p.stderr.String())
		}
	}
}

// manyRequests is an update log of n one-token requests.
func manyRequests(n int) string {
	var b strings.Builder
	for i := range n {
		id := "m" + strconv.Itoa(i)
		ts := 1700000100 + i
		b.WriteString(`{"request_id":"` + id + `","type":"ARRIVED","ts":` + strconv.Itoa(ts) + `,"model":"m"}` + "\n")
		b.WriteString(`{"request_id":"` + id + `","type":"DETOKENIZED","ts":` + strconv.Itoa(ts) + `.1,"num_new_tokens":1}` + "\n")
		b.WriteString(`{"request_id":"` + id + `","type":"FINISHED","ts":` + strconv.Itoa(ts) + `.2,"finish_reason":"stop"}` + "\n")
	}
	return b.String()
}
