package transport

import (
	"container/list"
	"context"
	"net"
	"sync/atomic"
)

// slot is a connection's place among the MaxConns. Until its producer is
// proven — it authenticated where a token is asked, else it delivered its
// first HELLO or update — the connection waits in Collector.pending,
// oldest first, and at the cap a newcomer closes the oldest of them
// (evicted). So a peer that never authenticates, however it trickles its
// bytes, cannot lock a producer out, and a proven producer is never closed
// to make room for anyone.
type slot struct {
	c    *Collector
	conn net.Conn // what eviction closes
	// elem is the slot's place in c.pending; nil once proven, evicted or
	// closed (guarded by c.mu).
	elem            *list.Element
	proven, evicted atomic.Bool
}

// pend puts a new connection's slot at the back of c.pending. Called with
// c.mu held.
func (s *slot) pend() { s.elem = s.c.pending.PushBack(s) }

// unpend takes s off c.pending, if it is there. Called with c.mu held.
func (s *slot) unpend() {
	if s.elem != nil {
		s.c.pending.Remove(s.elem)
		s.elem = nil
	}
}

// prove marks the producer proven: its connection is evicted no more. A nil
// slot (stdin, an HTTP body outside a Server) holds nothing to protect.
func (s *slot) prove() {
	if s == nil || s.proven.Swap(true) {
		return
	}
	s.c.mu.Lock()
	s.unpend()
	s.c.mu.Unlock()
}

// evictPending closes the oldest connection whose producer is not proven,
// so that a new one takes its place, and reports whether there was one.
// The place is handed over: the new connection holds it while the old
// one's goroutine ends.
func (c *Collector) evictPending() bool {
	c.mu.Lock()
	e := c.pending.Front()
	if e == nil {
		c.mu.Unlock()
		return false
	}
	old := e.Value.(*slot)
	old.unpend()
	c.mu.Unlock()
	old.evicted.Store(true)
	_ = old.conn.Close()
	c.open.Add(1) // the old connection's release gives its place back
	c.n.evicted.Add(1)
	c.inst.errs.Add(context.Background(), 1, c.inst.errAttrs["evicted"])
	return true
}
