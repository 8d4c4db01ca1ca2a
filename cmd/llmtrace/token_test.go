package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileReadsFirstLineOnly: -token-file reads the first line and no
// further. It read the whole file: /dev/zero took every byte of memory the
// machine had, and a FIFO or device that never ends held the start for
// ever. Here a FIFO sends 1 MiB with no line end and stays open.
func TestTokenFileReadsFirstLineOnly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
		<-hold
	}()
	type result struct {
		tok string
		err error
	}
	done := make(chan result, 1)
	go func() {
		tok, _, err := loadToken(fifo, func(string) string { return "" })
		done <- result{tok, err}
	}()
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "no line end") {
			t.Errorf("token %q, err %v; want a file with no line end refused", r.tok, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("-token-file read on past 64 KiB without a line end, waiting for the file's end")
	}

	// A token line followed by more than any token file holds.
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(" s3cret \n"+strings.Repeat("y", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, from, err := loadToken(big, nil); tok != "s3cret" || from != big || err != nil {
		t.Errorf("loadToken = %q, %q, %v; want the first line", tok, from, err)
	}
	// The last line without its newline, as echo -n writes it.
	last := filepath.Join(dir, "last")
	if err := os.WriteFile(last, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, _, err := loadToken(last, nil); tok != "tok" || err != nil {
		t.Errorf("loadToken = %q, %v; want tok", tok, err)
	}
}
