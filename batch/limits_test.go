package batch

import (
	"context"
	"math"
	"testing"
)

// TestHostileSizes: a queue or batch size no machine can hold (a huge
// OTEL_BSP_MAX_QUEUE_SIZE, or the option given math.MaxInt) is cut to
// MaxQueueSizeLimit, where make(chan) would panic or exhaust memory.
func TestHostileSizes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		queue, batch     int
		wantQ, wantBatch int
	}{
		{"max int", math.MaxInt, math.MaxInt, MaxQueueSizeLimit, MaxQueueSizeLimit},
		{"just above", MaxQueueSizeLimit + 1, 10, MaxQueueSizeLimit, 10},
		{"at the limit", MaxQueueSizeLimit, 10, MaxQueueSizeLimit, 10},
		{"ordinary", 64, 128, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConfig([]Option{WithMaxQueueSize(tc.queue), WithMaxExportBatchSize(tc.batch)})
			if c.queueSize != tc.wantQ || c.batchSize != tc.wantBatch {
				t.Fatalf("queue %d, batch %d; want %d, %d", c.queueSize, c.batchSize, tc.wantQ, tc.wantBatch)
			}
			if tc.queue < MaxQueueSizeLimit {
				return // no need to allocate a full-size queue for the others
			}
			p := NewProcessor(discard{}, WithMaxQueueSize(tc.queue), WithMaxExportBatchSize(16))
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
