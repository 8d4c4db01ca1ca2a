// Package freeport picks loopback TCP ports for the child processes tests
// start: a collector, Jaeger, Prometheus, a built llmtrace binary.
//
// The usual way, Listen("127.0.0.1:0") and Close, hands out a port from the
// kernel's ephemeral range, and that range is also where every outgoing
// connection of every process on the machine takes its local port. Between
// the Close and the child's bind, one of the suite's own connections can
// take it, and the child fails with "address already in use" (this failed a
// collector's start in CI). A port below the ephemeral range is never given
// to a connection, so it stays free unless another test picks the same one
// in that window; picking at random and never twice in a process makes that
// rare.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowest is the lowest port handed out: below it live the well-known and
// registered services a developer's machine may run.
const lowest = 10000

var (
	mu    sync.Mutex
	given = map[int]bool{} // ports this process has handed out
)

// Port returns a loopback TCP port that is free now and outside the
// ephemeral range. It fails t when none is found.
func Port(t testing.TB) int {
	t.Helper()
	return Ports(t, 1)[0]
}

// Addr returns "127.0.0.1:<Port>".
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Port(t))
}

// Ports returns n distinct such ports.
func Ports(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := ephemeralRange()
	ports, err := pick(n, lo, hi)
	if err != nil {
		t.Fatalf("freeport: %v", err)
	}
	return ports
}

// pick holds a listener on each port it chooses until all n are chosen, so
// the n are distinct and were free together.
func pick(n int, ephLo, ephHi int) ([]int, error) {
	lo, hi := lowest, ephLo-1
	if hi-lo < 1000 { // an ephemeral range reaching down low: use above it
		lo, hi = ephHi+1, 65535
	}
	if hi-lo < 1000 {
		return nil, fmt.Errorf("no room outside the ephemeral range %d-%d", ephLo, ephHi)
	}
	mu.Lock()
	defer mu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	span := hi - lo + 1
	start := rand.IntN(span)
	for i := 0; i < span && len(ports) < n; i++ {
		p := lo + (start+i)%span
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found %d free ports in %d-%d, want %d", len(ports), lo, hi, n)
	}
	for _, p := range ports {
		given[p] = true
	}
	return ports, nil
}

// ephemeralRange is the kernel's range for outgoing connections' local
// ports: Linux's ip_local_port_range, else the IANA range other systems use.
func ephemeralRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			lo, err1 := strconv.Atoi(f[0])
			hi, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && lo > 0 && lo <= hi && hi <= 65535 {
				return lo, hi
			}
		}
	}
	return 49152, 65535
}
