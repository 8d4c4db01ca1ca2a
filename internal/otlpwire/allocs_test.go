//go:build !race

// The race detector's instrumentation changes what escapes to the heap, so
// allocation budgets hold only without it (scripts/test.sh runs them
// without).

package otlpwire

import (
	"context"
	"runtime"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// sizeOnly is a client that allocates nothing: it notes the size of what
// it was given, so that a test sees the exporter's own allocations.
type sizeOnly struct{ n int }

func (*sizeOnly) Start(context.Context) error { return nil }
func (*sizeOnly) Stop(context.Context) error  { return nil }
func (c *sizeOnly) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	c.n = 0
	for _, r := range rs {
		c.n += len(r.ProtoReflect().GetUnknown())
	}
	return nil
}

// TestExportAllocationsAfterGC: an export after garbage collections reuses
// the buffer the last one grew. A batch processor exports about once a
// second while collections come more often; with the buffer in a
// sync.Pool alone, every export regrew it through fresh pages (page
// faults, zeroing and copies: a tenth of the proxy's exporting cost under
// load).
func TestExportAllocationsAfterGC(t *testing.T) {
	ctx := context.Background()
	client := &sizeOnly{}
	e, err := New(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	spans := requestSpans()
	if err := e.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	encoded := client.n
	var before, after runtime.MemStats
	for range 3 {
		runtime.GC()
		runtime.GC() // a pooled object survives one collection, not two
		runtime.ReadMemStats(&before)
		if err := e.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(encoded)/8 {
			t.Fatalf("an export after two collections allocated %d bytes for %d encoded: the buffer was regrown", got, encoded)
		}
	}
	if client.n != encoded {
		t.Fatalf("the reused buffer encoded %d bytes, the first export %d", client.n, encoded)
	}
}
