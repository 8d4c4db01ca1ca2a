package testbackend

import (
	"net"
	"sync/atomic"
	"testing"
)

// Silent is a TCP endpoint that accepts connections and never answers: a
// backend that hangs, for tests of export timeouts and drops.
type Silent struct {
	ln    net.Listener
	conns atomic.Int32
}

// StartSilent listens on a free local port until the test ends.
func StartSilent(t testing.TB) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			s.conns.Add(1)
			held = append(held, c) // read nothing, answer never
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return s
}

// Addr is the endpoint's host:port.
func (s *Silent) Addr() string { return s.ln.Addr().String() }

// Conns is how many connections it accepted.
func (s *Silent) Conns() int { return int(s.conns.Load()) }
