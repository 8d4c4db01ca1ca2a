package otelstats

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmtrace/llmtrace/attributes"
)

// SPEC §2, §7, §9: num_encoder_tokens (ENCODING) and kv_bytes
// (REMOTE_KV_READY) are optional, and a value nobody measured is absent,
// never 0. Without them llm.encode has no llm.encode.tokens, llm.kv_transfer
// no llm.kv_transfer.bytes, RequestStats' JSON no kv_transfer_bytes, and
// llm.server.kv_transfer.bytes gets no measurement (not even an Add of 0,
// which makes a data point). A failed transfer's reported bytes still
// count, as the README has them: bytes that arrived, tokens recomputed.
func TestUnreportedEncoderTokensAndKVBytes(t *testing.T) {
	encode := func(tokens int) []Update {
		return []Update{arrived("r", 0, "m", "chat"), inputProcessed("r", 1, 10), queued("r", 2),
			encoding("r", 3, 2, tokens), encoded("r", 5, false), prefilling("r", 6, 10, 0),
			decoding("r", 8, 1), enFinished("r", 9, "stop")}
	}
	transfer := func(bytes int64, status string) []Update {
		us := decodeInstance("r", status)
		us[4].KVBytes = bytes // REMOTE_KV_READY
		return us
	}
	for _, tc := range []struct {
		name      string
		us        []Update
		encTokens int64 // llm.encode.tokens; -1: no llm.encode span; 0: absent
		kvBytes   int64 // llm.kv_transfer.bytes, the counter, kv_transfer_bytes; -1: no transfer; 0: absent
	}{
		{"encoder tokens reported", encode(576), 576, -1},
		{"encoder tokens not reported", encode(0), 0, -1},
		{"kv bytes reported", transfer(4<<20, ""), -1, 4 << 20},
		{"kv bytes not reported", transfer(0, ""), -1, 0},
		{"failed transfer, bytes reported", transfer(1<<20, KVStatusFailed), -1, 1 << 20},
		{"failed transfer, bytes not reported", transfer(0, KVStatusFailed), -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.feed(tc.us)
			h.tr.Flush()
			s := h.statsOf("r")
			_, kids := h.treeOf(s)
			spans := map[string]int{}
			for _, k := range kids {
				var key attribute.Key
				var want int64
				switch k.Name() {
				case attributes.SpanEncode:
					key, want = attributes.EncodeTokens, tc.encTokens
				case attributes.SpanKVTransfer:
					key, want = attributes.KVTransferBytes, tc.kvBytes
				default:
					continue
				}
				spans[k.Name()]++
				v, ok := attrOf(k.Attributes(), key)
				if ok != (want > 0) || ok && v.AsInt64() != want {
					t.Errorf("%s: %s = %s (present %v), want %d (present %v)", k.Name(), key, v.String(), ok, want, want > 0)
				}
			}
			if (spans[attributes.SpanEncode] == 1) != (tc.encTokens >= 0) || (spans[attributes.SpanKVTransfer] == 1) != (tc.kvBytes >= 0) {
				t.Fatalf("spans %v", spans)
			}
			if tc.kvBytes < 0 {
				return
			}
			if s.KVTransferBytes != tc.kvBytes {
				t.Errorf("KVTransferBytes = %d, want %d", s.KVTransferBytes, tc.kvBytes)
			}
			js := string(s.AppendJSON(nil))
			if got := strings.Contains(js, `"kv_transfer_bytes":`); got != (tc.kvBytes > 0) {
				t.Errorf("kv_transfer_bytes in the JSON %v, want %v: %s", got, tc.kvBytes > 0, js)
			}
			h.wantCounter(attributes.MetricKVTransferBytes, tc.kvBytes)
			var points int
			if d, ok := h.metrics()[attributes.MetricKVTransferBytes]; ok {
				points = len(d.(metricdata.Sum[int64]).DataPoints)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.kvBytes > 0]; points != want {
				t.Errorf("%s has %d data points, want %d", attributes.MetricKVTransferBytes, points, want)
			}
		})
	}
}

// The stats log's KV throughput is over the transfers that reported their
// bytes: a transfer without kv_bytes adds its time to the average duration
// but neither 0 bytes nor its time to the MB/s, and an interval whose
// transfers reported none has no MB/s, not 0.0.
func TestStatsLogKVThroughputOnlyReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes []int64 // per 10 ms transfer
		want  string  // "": no MB/s
	}{
		{"every transfer", []int64{10e6, 10e6}, ", 1000.0 MB/s"},
		{"one of two", []int64{10e6, 0}, ", 1000.0 MB/s"},
		{"none", []int64{0, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := newHarness(t, WithStatsLog(slog.New(slog.NewTextHandler(&logs, nil)), time.Second))
			_ = h.tr.RecordSchedulerStats(at(0), SchedulerStats{})
			for i, b := range tc.bytes {
				us := decodeInstance(strconv.Itoa(i), "")
				us[4].KVBytes = b
				h.feed(us)
			}
			h.tr.Flush()
			_ = h.tr.RecordSchedulerStats(at(1000), SchedulerStats{})
			line := h.tr.LastStats().String()
			if !strings.Contains(line, "KV transfer: 2 transfers (0 failed), avg 10.0 ms") {
				t.Fatalf("line %q", line)
			}
			if got := strings.Contains(line, "MB/s"); got != (tc.want != "") || tc.want != "" && !strings.Contains(line, tc.want) {
				t.Errorf("line %q, want %q", line, tc.want)
			}
		})
	}
}
