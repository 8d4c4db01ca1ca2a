package transport

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestListenKeepsBusySocket: a live collector whose accept queue is full
// (a flood, the fd limit) answers a dial with EAGAIN, not with the
// ECONNREFUSED of a socket nobody listens on. Listen took any failed dial
// for a dead collector and removed the socket: the second collector took
// the path from the live one, whose producers could no longer reconnect,
// and the first one's exit then unlinked the second's socket.
func TestListenKeepsBusySocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a full accept queue refuses with EAGAIN on Linux only")
	}
	path := filepath.Join(shortDir(t), "s.sock")
	// A listener with the shortest accept queue, never accepting.
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), path)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; ; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			break // the queue is full
		}
		defer c.Close()
		if i == 100 {
			t.Fatal("the accept queue never filled")
		}
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := Listen(Addr{"unix", path}, false); err == nil {
		l2.Close()
		t.Fatal("replaced the socket of a live listener whose accept queue is full")
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the live listener's socket file is gone (%v)", err)
	}
}

// TestListenPathTooLong: a socket path longer than sun_path allows failed
// with the kernel's bare "bind: invalid argument"; the error now says the
// path is too long, and by how much (a path under a pod's volume mount is
// easily 120 bytes).
func TestListenPathTooLong(t *testing.T) {
	path := filepath.Join(shortDir(t), strings.Repeat("a", 130)+".sock")
	l, err := Listen(Addr{"unix", path}, false)
	if err == nil {
		l.Close()
		t.Skip("this system takes a 130-byte socket path")
	}
	if !strings.Contains(err.Error(), "longer than the") || !strings.Contains(err.Error(), strconv.Itoa(len(path))+" bytes") {
		t.Errorf("Listen(%d-byte path): %v; want the length named", len(path), err)
	}
}
