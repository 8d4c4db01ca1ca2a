package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Addr is a transport address: "unix:PATH" or "tcp:HOST:PORT".
type Addr struct {
	Network string // "unix" or "tcp"
	Address string
}

func (a Addr) String() string { return a.Network + ":" + a.Address }

// ParseAddr parses "unix:PATH" or "tcp:HOST:PORT". A bare path (containing
// a '/') is a Unix socket.
func ParseAddr(s string) (Addr, error) {
	network, rest, ok := strings.Cut(s, ":")
	switch {
	case ok && network == "unix" && rest != "":
		return Addr{"unix", rest}, nil
	case ok && network == "tcp" && rest != "":
		_, port, err := net.SplitHostPort(rest)
		if err == nil {
			// A port out of range (99999) is the caller's mistake, found
			// here rather than when the listen fails.
			_, err = net.LookupPort("tcp", port)
		}
		if err != nil {
			return Addr{}, fmt.Errorf("transport: address %q: %w", s, err)
		}
		return Addr{"tcp", rest}, nil
	case strings.Contains(s, "/") && !ok:
		return Addr{"unix", s}, nil
	}
	return Addr{}, fmt.Errorf("transport: address %q: want unix:PATH or tcp:HOST:PORT", s)
}

// ErrNotLoopback is returned by Listen for a TCP address that is not on
// the loopback interface (":PORT" and "0.0.0.0:PORT" included) when remote
// listening is not allowed: any host that reaches it could inject
// telemetry, so it takes an explicit choice and, sensibly, a token.
var ErrNotLoopback = errors.New("transport: not a loopback address (listening for other hosts needs allow-remote, and a token)")

// Listen listens on a. A Unix socket left behind by a dead collector (a
// dial to it is refused) is removed first; one a live collector still
// answers on, or whose dial fails otherwise (a full accept queue), is not.
// TCP listens only on loopback addresses unless allowRemote.
func Listen(a Addr, allowRemote bool) (net.Listener, error) {
	switch a.Network {
	case "unix":
		if fi, err := os.Lstat(a.Address); err == nil && fi.Mode()&os.ModeSocket != 0 {
			c, err := net.DialTimeout("unix", a.Address, 200*time.Millisecond)
			if err == nil {
				_ = c.Close()
				return nil, fmt.Errorf("transport: %s: a collector is already listening", a)
			}
			// Only a refused dial says nobody listens there. A live
			// collector whose accept queue is full (a flood, the fd
			// limit) answers EAGAIN: removing its socket would cut its
			// producers off, and its exit would unlink ours.
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return nil, fmt.Errorf("transport: %s: cannot tell whether a collector listens there, so the socket is kept: %w", a, err)
			}
			_ = os.Remove(a.Address)
		}
		l, err := net.Listen("unix", a.Address)
		if err != nil {
			// The kernel's answer to a path past sun_path is a bare
			// "bind: invalid argument"; say what is wrong.
			if limit := len(syscall.RawSockaddrUnix{}.Path) - 1; len(a.Address) > limit && errors.Is(err, syscall.EINVAL) {
				return nil, fmt.Errorf("transport: %s: the path is %d bytes, longer than the %d a Unix socket's may be: %w", a, len(a.Address), limit, err)
			}
			return nil, err
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(true)
		}
		return l, nil
	case "tcp":
		host, _, _ := net.SplitHostPort(a.Address)
		if !allowRemote && !isLoopback(host) {
			return nil, fmt.Errorf("%w: %s", ErrNotLoopback, a)
		}
		return net.Listen("tcp", a.Address)
	}
	return nil, fmt.Errorf("transport: unknown network %q", a.Network)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Dial connects to a.
func Dial(ctx context.Context, a Addr) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, a.Network, a.Address)
}
