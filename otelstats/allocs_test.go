//go:build !race

// The race detector's instrumentation changes what escapes to the heap, so
// allocation budgets hold only without it (scripts/test.sh runs the suite
// both ways).

package otelstats_test

import (
	"testing"
	"time"
)

// TestRequestAllocations holds the per-request allocation budget (issue 13:
// at most 7 for the whole request of BenchmarkRequestGivenTimes on the fast
// setup) and the per-token one (0 for a decode token by handle), so that a
// change that makes an Update escape — an indirect call was enough once —
// fails the suite rather than a benchmark nobody reads. Allocation counts do
// not depend on how busy the machine is.
func TestRequestAllocations(t *testing.T) {
	p := newBenchPipelineFor(t, nil, benchFast)
	e := newBenchEngine(t, newBenchTracker(t, p), newBenchClock(time.Now(), benchEngineTick))
	i := 0
	perRequest := testing.AllocsPerRun(200, func() {
		j := i % len(benchIDs)
		e.arrive(t, benchIDs[j:j+1]...)
		e.benchRequest(t)
		i++
	})
	if perRequest > 7 {
		t.Errorf("%.1f allocations per request, budget 7", perRequest)
	}
	t.Logf("%.1f allocations per request", perRequest)
}
