package otelconf

import (
	"testing"

	"github.com/llmtrace/llmtrace/batch"
)

// TestBatchConfigHostile: OTEL_BSP_* values past what a machine or a
// time.Duration holds are a warning and the default (a size, as the
// specification has an out-of-range value) or the longest duration (a
// delay or timeout: "a very long time"), never a panic in make(chan) nor
// a duration that wraps to negative and exports every millisecond or
// times every export out at once.
func TestBatchConfigHostile(t *testing.T) {
	const def = "OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000"
	for _, tc := range []struct {
		name   string
		env    []string
		want   string
		warned bool
	}{
		{"queue max int64", []string{"OTEL_BSP_MAX_QUEUE_SIZE", "9223372036854775807"}, def, true},
		{"queue past the limit", []string{"OTEL_BSP_MAX_QUEUE_SIZE", itoa(batch.MaxQueueSizeLimit + 1)}, def, true},
		{"queue at the limit", []string{"OTEL_BSP_MAX_QUEUE_SIZE", itoa(batch.MaxQueueSizeLimit)},
			"OTEL_BSP_MAX_QUEUE_SIZE=16777216 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000", false},
		{"batch max int64", []string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "9223372036854775807"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=16384 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=10000", false},
		// 9.3e12 ms is past time.Duration's 9.22e12: it wrapped to a
		// negative delay (the processor's 1 ms) and timeout.
		{"delay past Duration", []string{"OTEL_BSP_SCHEDULE_DELAY", "9300000000000"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=9223372036854 OTEL_BSP_EXPORT_TIMEOUT=10000", false},
		{"timeout past Duration", []string{"OTEL_BSP_EXPORT_TIMEOUT", "9300000000000"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=0", false},
		{"timeout max int64", []string{"OTEL_BSP_EXPORT_TIMEOUT", "9223372036854775807"},
			"OTEL_BSP_MAX_QUEUE_SIZE=16384 OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1024 OTEL_BSP_SCHEDULE_DELAY=1000 OTEL_BSP_EXPORT_TIMEOUT=0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, tc.env...)
			errs := captureErrors(t)
			c := batchConfig()
			if got := c.String(); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
			if c.BatchTimeout <= 0 || c.ExportTimeout <= 0 {
				t.Errorf("delay %v, timeout %v: not positive", c.BatchTimeout, c.ExportTimeout)
			}
			if warned := len(errs.all()) > 0; warned != tc.warned {
				t.Errorf("warned %v: %v", warned, errs.all())
			}
		})
	}
}
