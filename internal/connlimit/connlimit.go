// Package connlimit caps the connections an http.Server holds, so a flood
// of idle connections costs a counter, not the file descriptors that real
// clients need: at the cap, a new connection closes the oldest one that is
// not serving a request (never sent one, or idle between keep-alive
// requests), and only when every held connection is busy is the new one
// closed at once.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener holding at most Max connections; set the
// server's ConnState to its ConnState so it knows which ones are busy. Its
// zero value is not usable; create it with New. It is safe for concurrent
// use.
type Listener struct {
	net.Listener
	max int

	mu    sync.Mutex
	open  int
	spare list.List // *conn not serving a request, oldest first

	refused, evicted atomic.Int64
}

// New caps l at max connections (max ≤ 0: no cap, connections are only
// tracked).
func New(l net.Listener, max int) *Listener {
	return &Listener{Listener: l, max: max}
}

// conn gives its slot back once, at its first Close.
type conn struct {
	net.Conn
	l    *Listener
	elem *list.Element // in l.spare while not serving; guarded by l.mu
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.unspare(c)
		c.l.open--
		c.l.mu.Unlock()
	})
	return err
}

// Accept waits for a connection within the cap.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err // net/http backs off on temporary errors
		}
		l.mu.Lock()
		var victim *conn
		if l.max > 0 && l.open >= l.max {
			if e := l.spare.Front(); e != nil {
				victim = e.Value.(*conn)
				l.unspare(victim)
			}
		}
		if l.max > 0 && l.open >= l.max && victim == nil {
			l.mu.Unlock()
			l.refused.Add(1)
			_ = nc.Close()
			continue
		}
		c := &conn{Conn: nc, l: l}
		l.open++ // the victim's Close gives its slot back
		c.elem = l.spare.PushBack(c)
		l.mu.Unlock()
		if victim != nil {
			l.evicted.Add(1)
			_ = victim.Close()
		}
		return c, nil
	}
}

// ConnState is the http.Server's ConnState: a connection serving a request
// is not evicted.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*conn)
	if !ok || c.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		if c.elem == nil {
			c.elem = l.spare.PushBack(c)
		}
	case http.StateActive, http.StateHijacked, http.StateClosed:
		l.unspare(c)
	}
}

// unspare takes c off the spare list. Called with l.mu held.
func (l *Listener) unspare(c *conn) {
	if c.elem != nil {
		l.spare.Remove(c.elem)
		c.elem = nil
	}
}

// Stats are the listener's counters.
type Stats struct {
	Open    int   // connections held now
	Refused int64 // closed at once: the cap was full of busy connections
	Evicted int64 // idle or silent connections closed to make room
}

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: open, Refused: l.refused.Load(), Evicted: l.evicted.Load()}
}
