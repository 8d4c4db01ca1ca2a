package otelstats

import (
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §7: llm.pd.role is on every instance counter of a WithPDRole
// tracker — its health counters too (README: Metrics), among them the
// requests evicted at the in-flight cap.
func TestWithPDRoleHealthCounters(t *testing.T) {
	h := newHarness(t, WithPDRole(PDRolePrefill), WithMaxInFlight(1))
	for i := range 100 { // eviction takes the oldest of the arriving request's shard
		h.must(arrived("r"+strconv.Itoa(i), float64(i), "m", "chat"))
	}
	role := []attribute.KeyValue{attributes.PDRole.String(PDRolePrefill)}
	for _, m := range []string{attributes.MetricRequestsEvicted} {
		sets := attrSetsOf(h.metrics()[m])
		if len(sets) != 1 || !hasAll(sets[0], role) {
			t.Errorf("%s attributes %v, want llm.pd.role=prefill", m, sets)
		}
	}
	if h.counter(attributes.MetricRequestsEvicted) == 0 {
		t.Fatal("no request evicted")
	}
}
