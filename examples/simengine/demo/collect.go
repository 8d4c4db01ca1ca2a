package demo

import (
	"sync"

	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelstats"
)

// collection is what the trackers' OnFinish callbacks feed: the client's
// percentile table, the serving features' numbers, the sampling reasons,
// and the picker of waterfalls. In P/D a client request finishes on three
// trackers (router, prefill, decode) in any order — the router first when
// the client disconnects — so the picker sees it once all of them did and
// every span of its trace has ended. Safe for concurrent use.
type collection struct {
	mu      sync.Mutex
	client  summary.Collector
	serving servingStats
	kept    map[string]int
	pick    *picker
	pending map[string]*joining // by trace id, P/D only
	also    func(*otelstats.RequestStats)
}

// joining is a P/D request some of whose trackers have finished it.
type joining struct {
	client *otelstats.RequestStats
	parts  []otelstats.RequestStats
	// need is how many instance-side requests the router's involved: P,
	// and D once P answered.
	need int
}

func newCollection(p *picker, also func(*otelstats.RequestStats)) *collection {
	return &collection{kept: map[string]int{}, pick: p, pending: map[string]*joining{}, also: also}
}

func (c *collection) onClient(s *otelstats.RequestStats) {
	c.client.Add(s)
	c.serving.addClient(s)
	c.kept[s.SamplingReason]++
}

// unified is OnFinish of the one engine's tracker.
func (c *collection) unified(s *otelstats.RequestStats) {
	c.mu.Lock()
	c.onClient(s)
	c.serving.addEngine(s)
	c.pick.observe(s, nil)
	c.mu.Unlock()
	if c.also != nil {
		c.also(s)
	}
}

// router is OnFinish of the P/D router's tracker.
func (c *collection) router(s *otelstats.RequestStats) {
	c.mu.Lock()
	c.onClient(s)
	j := c.join(s.TraceID)
	cp := *s
	cp.OutputTokenLatencies = nil
	j.client, j.need = &cp, 1
	if s.PDPrefillDuration.Valid {
		j.need = 2
	}
	c.settle(s.TraceID, j)
	c.mu.Unlock()
	if c.also != nil {
		c.also(s)
	}
}

// instance is OnFinish of a P/D instance's tracker.
func (c *collection) instance(s *otelstats.RequestStats) {
	c.mu.Lock()
	c.serving.addEngine(s)
	j := c.join(s.TraceID)
	cp := *s
	cp.OutputTokenLatencies = nil
	j.parts = append(j.parts, cp)
	c.settle(s.TraceID, j)
	c.mu.Unlock()
	if c.also != nil {
		c.also(s)
	}
}

func (c *collection) join(trace string) *joining {
	j := c.pending[trace]
	if j == nil {
		j = &joining{}
		c.pending[trace] = j
	}
	return j
}

// settle hands a request whose every part finished to the picker.
func (c *collection) settle(trace string, j *joining) {
	if j.client == nil || len(j.parts) < j.need {
		return
	}
	delete(c.pending, trace)
	c.pick.observe(j.client, j.parts)
}
