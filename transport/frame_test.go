package transport

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/otelstats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func f64(v float64) *float64 { return &v }
func i64(v int64) *int64     { return &v }

// sampleUpdates covers every kind and every field.
func sampleUpdates() []otelstats.Update {
	return []otelstats.Update{
		{RequestID: "r1", Kind: otelstats.KindArrived, Model: "llama-3-8b", Operation: "chat", Scope: "tenant-a"},
		{RequestID: "r1", Kind: otelstats.KindInputProcessed, NumPromptTokens: 512,
			Sampling: &otelstats.SamplingParams{Temperature: f64(0.7), MaxTokens: i64(256), Stop: []string{"\n\n"}}},
		{RequestID: "r1", Kind: otelstats.KindQueued, Side: otelstats.SideEngine},
		{RequestID: "r1", Kind: otelstats.KindPrefilling, NumComputedTokens: 512, NumCachedTokens: 128},
		{RequestID: "r1", Kind: otelstats.KindPrefilling, NumComputedTokens: 0, NumCachedTokens: 0},
		{RequestID: "r1", Kind: otelstats.KindDecoding, NumNewTokens: 3},
		{RequestID: "r1", Kind: otelstats.KindPreempted},
		{RequestID: "r1", Kind: otelstats.KindDetokenized, NumNewTokens: 0, Busy: 250 * time.Microsecond},
		{RequestID: "r1", Kind: otelstats.KindDetokenized, NumNewTokens: 2},
		{RequestID: "r1", Kind: otelstats.KindFinished, Side: otelstats.SideEngine, FinishReason: "stop"},
		{RequestID: strings.Repeat("x", otelstats.MaxIDLength), Kind: otelstats.KindFinished, FinishReason: "error", ErrorType: "timeout", NumPromptTokens: 7},
		// SPEC §7–9's kinds and payloads.
		{RequestID: "pd", Kind: otelstats.KindArrived, Model: "m", PDRole: otelstats.PDRoleDecode, LoRAAdapter: "sql-lora"},
		{RequestID: "pd", Kind: otelstats.KindRemoteKVWait, KVSource: "prefill-3"},
		{RequestID: "pd", Kind: otelstats.KindRemoteKVReady, NumRemoteTokens: 480, KVBytes: 1 << 33, KVStatus: otelstats.KVStatusFailed},
		{RequestID: "pd", Kind: otelstats.KindRemoteKVReady, NumRemoteTokens: 0},
		{RequestID: "pd", Kind: otelstats.KindDecoding, NumNewTokens: 3, NumDraftTokens: 4, NumAcceptedTokens: 2},
		{RequestID: "mm", Kind: otelstats.KindEncoding, NumItems: 2, NumEncoderTokens: 576},
		{RequestID: "mm", Kind: otelstats.KindEncoding, NumItems: 0},
		{RequestID: "mm", Kind: otelstats.KindEncoded, EncoderCacheHit: true},
		{RequestID: "mm", Kind: otelstats.KindFinished, FinishReason: "stop", NumOutputTokens: 12},
		{RequestID: "routed", Kind: otelstats.KindArrived, Model: "m", Parent: routerSpan()},
	}
}

// routerSpan is a router's span context, as a traceparent carries it.
func routerSpan() trace.SpanContext {
	ts, _ := trace.ParseTraceState("router=r1")
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{9, 8, 7, 6, 5, 4, 3, 2},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
}

func TestFrameRoundTrip(t *testing.T) {
	var buf []byte
	buf = AppendHeader(buf)
	buf = AppendHello(buf, Hello{Producer: "engine-0", WallNs: 1_700_000_000_123_456_789, MonoNs: 42})
	ups := sampleUpdates()
	for i := range ups {
		buf = AppendUpdate(buf, &ups[i], Stamp{Ns: int64(1000 + i), Mono: i%2 == 0})
	}
	if string(buf[:4]) != Magic || buf[4] != Version {
		t.Fatalf("header % x", buf[:5])
	}
	b := buf[headerLen:]
	f, n, err := DecodeFrame(b, DefaultMaxFrame)
	if err != nil || f.Type != FrameHello {
		t.Fatalf("hello: %v %+v", err, f)
	}
	if want := (Hello{Producer: "engine-0", WallNs: 1_700_000_000_123_456_789, MonoNs: 42}); f.Hello != want {
		t.Fatalf("hello = %+v, want %+v", f.Hello, want)
	}
	b = b[n:]
	for i, want := range ups {
		f, n, err := DecodeFrame(b, DefaultMaxFrame)
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if f.Reject != nil {
			t.Fatalf("update %d rejected: %v", i, f.Reject)
		}
		if f.Stamp != (Stamp{Ns: int64(1000 + i), Mono: i%2 == 0}) {
			t.Errorf("update %d: stamp %+v", i, f.Stamp)
		}
		if want.Kind == otelstats.KindDecoding && want.NumNewTokens == 0 {
			want.NumNewTokens = 1
		}
		if !reflect.DeepEqual(f.Update, want) {
			t.Errorf("update %d:\n got %+v\nwant %+v", i, f.Update, want)
		}
		b = b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
}

// TestEncodingsAgree: every update, through the binary encoding and
// through the update log, decodes to the same Update — neither encoding
// carries a field the other drops.
func TestEncodingsAgree(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 5).UTC()
	for i, u := range sampleUpdates() {
		u.Time = t0
		f, _, err := DecodeFrame(AppendUpdate(nil, &u, Stamp{Ns: t0.UnixNano()}), DefaultMaxFrame)
		if err != nil || f.Reject != nil {
			t.Fatalf("update %d binary: %v %v", i, err, f.Reject)
		}
		f.Update.Time = t0
		j, err := ParseUpdate(AppendUpdateJSON(nil, &u))
		if err != nil {
			t.Fatalf("update %d JSON: %v", i, err)
		}
		if !reflect.DeepEqual(f.Update, j) {
			t.Errorf("update %d:\nbinary %+v\n  json %+v", i, f.Update, j)
		}
	}
}

// TestDocExample checks the bytes shown in doc.go.
func TestDocExample(t *testing.T) {
	got := AppendHello(AppendHeader(nil), Hello{Producer: "e0", WallNs: 1_700_000_000_000_000_000, MonoNs: 5_000_000_000})
	want := "4C4C4D5401" + "0000001201" + "8080A8B1E39FE7CB17" + "80E497D012" + "026530"
	if strings.ToUpper(hex.EncodeToString(got)) != want {
		t.Fatalf("doc example:\n got % X\nwant %s", got, want)
	}
	got = AppendHello(nil, Hello{Producer: "e0", WallNs: 1_700_000_000_000_000_000, MonoNs: 5_000_000_000, Side: otelstats.SideEngine, Token: "s3cret"})
	want = "0000001C01" + "8080A8B1E39FE7CB17" + "80E497D012" + "026530" + "0102" + "4006" + hex.EncodeToString([]byte("s3cret"))
	if !strings.EqualFold(hex.EncodeToString(got), want) {
		t.Fatalf("doc example with side and token:\n got % X\nwant %s", got, want)
	}
	u := otelstats.Update{RequestID: "0123456789abcdef", Kind: otelstats.KindDecoding, Side: otelstats.SideEngine}
	got = AppendUpdate(nil, &u, Stamp{Ns: 8_123_000_123_456, Mono: true})
	want = "0000001B" + "02" + "06" + "06" + "C0E0A5C4B4EC01" + "10" + hex.EncodeToString([]byte("0123456789abcdef"))
	if !strings.EqualFold(hex.EncodeToString(got), want) {
		t.Fatalf("doc example:\n got % X\nwant %s", got, want)
	}
}

func frame(typ byte, body ...byte) []byte {
	b := []byte{0, 0, 0, 0, typ}
	b = append(b, body...)
	l := len(b) - 4
	b[0], b[1], b[2], b[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
	return b
}

func TestDecodeFrameErrors(t *testing.T) {
	good := AppendUpdate(nil, &otelstats.Update{RequestID: "r", Kind: otelstats.KindQueued}, Stamp{Ns: 5})
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrIncomplete},
		{"short length", []byte{0, 0}, ErrIncomplete},
		{"short body", good[:len(good)-1], ErrIncomplete},
		{"zero length", []byte{0, 0, 0, 0, 1}, ErrFrameSize},
		{"oversized", []byte{0, 1, 0, 1, 2}, ErrFrameSize},
		{"huge", []byte{0xFF, 0xFF, 0xFF, 0xFF}, ErrFrameSize},
		{"hello without wall", frame(FrameHello, 0, 0, 0), ErrMalformed},
		{"hello truncated varint", frame(FrameHello, 0x80), ErrMalformed},
		{"hello name past end", frame(FrameHello, 1, 1, 9, 'a'), ErrMalformed},
		{"update no body", frame(FrameUpdate), ErrMalformed},
		{"bad kind", frame(FrameUpdate, 99, 0, 1, 1, 'r'), ErrMalformed},
		{"kind zero", frame(FrameUpdate, 0, 0, 1, 1, 'r'), ErrMalformed},
		{"side 3", frame(FrameUpdate, 3, 3, 1, 1, 'r'), ErrMalformed},
		{"unknown flag", frame(FrameUpdate, 3, 0x08, 1, 1, 'r'), ErrMalformed},
		{"empty id", frame(FrameUpdate, 3, 0, 1, 0), ErrMalformed},
		{"id past end", frame(FrameUpdate, 3, 0, 1, 5, 'r'), ErrMalformed},
		{"varint overflow", frame(FrameUpdate, 3, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 1, 'r'), ErrMalformed},
		{"field id 0", frame(FrameUpdate, 3, 0, 1, 1, 'r', 0), ErrMalformed},
		{"field id 0x80", frame(FrameUpdate, 3, 0, 1, 1, 'r', 0x80, 1), ErrMalformed},
		{"field without value", frame(FrameUpdate, 3, 0, 1, 1, 'r', 0x01), ErrMalformed},
		{"string past end", frame(FrameUpdate, 3, 0, 1, 1, 'r', 0x40, 9, 'm'), ErrMalformed},
		{"bad sampling", frame(FrameUpdate, 2, 0, 1, 1, 'r', 0x01, 5, 0x45, 1, '['), ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeFrame(c.in, DefaultMaxFrame)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func TestDecodeFrameSkipsUnknown(t *testing.T) {
	// An unknown frame type and unknown field ids are skipped.
	in := frame(0x7E, 1, 2, 3)
	f, n, err := DecodeFrame(in, DefaultMaxFrame)
	if err != nil || n != len(in) || f.Type != 0x7E {
		t.Fatalf("unknown type: %v n=%d %+v", err, n, f)
	}
	in = frame(FrameUpdate, 3, 2, 7, 1, 'r', 0x3F, 0x80, 0x01, 0x7F, 2, 'h', 'i', 0x40, 1, 'm')
	f, _, err = DecodeFrame(in, DefaultMaxFrame)
	if err != nil || f.Update.Model != "m" || f.Update.Side != otelstats.SideEngine || f.Stamp.Ns != 7 {
		t.Fatalf("unknown fields: %v %+v", err, f)
	}
}

func TestDecodeFrameMissingPayload(t *testing.T) {
	cases := map[string][]byte{
		"INPUT_PROCESSED": frame(FrameUpdate, 2, 0, 1, 1, 'r'),
		"PREFILLING":      frame(FrameUpdate, 4, 0, 1, 1, 'r', 0x02, 5),
		"DETOKENIZED":     frame(FrameUpdate, 7, 0, 1, 1, 'r'),
		"DECODING 0":      frame(FrameUpdate, 6, 0, 1, 1, 'r', 0x04, 0),
		"REMOTE_KV_WAIT":  frame(FrameUpdate, 9, 0, 1, 1, 'r'),
		"REMOTE_KV_READY": frame(FrameUpdate, 10, 0, 1, 1, 'r'),
		"ENCODING":        frame(FrameUpdate, 11, 0, 1, 1, 'r'),
	}
	for name, in := range cases {
		f, n, err := DecodeFrame(in, DefaultMaxFrame)
		if err != nil || n != len(in) {
			t.Fatalf("%s: %v", name, err)
		}
		if f.Reject == nil || f.Reject.Reason != otelstats.ReasonMissingPayload {
			t.Errorf("%s: reject = %v", name, f.Reject)
		}
	}
	// A traceparent that is not one is rejected as in the update log.
	f, _, err := DecodeFrame(frame(FrameUpdate, 1, 0, 1, 1, 'r', 0x40, 1, 'm', 0x4A, 3, 'x', 'y', 'z'), DefaultMaxFrame)
	if err != nil || f.Reject == nil || f.Reject.Reason != otelstats.ReasonMalformed {
		t.Errorf("bad traceparent: %v %v", err, f.Reject)
	}
	// The draft count goes with the accepted count, as in the update log.
	f, _, err = DecodeFrame(frame(FrameUpdate, 6, 0, 1, 1, 'r', 0x09, 4), DefaultMaxFrame)
	if err != nil || f.Reject == nil || f.Reject.Reason != otelstats.ReasonDraftWithoutAccepted {
		t.Errorf("draft without accepted: %v %v", err, f.Reject)
	}
	// DECODING without num_new_tokens means one token.
	f, _, err = DecodeFrame(frame(FrameUpdate, 6, 0, 1, 1, 'r'), DefaultMaxFrame)
	if err != nil || f.Reject != nil || f.Update.NumNewTokens != 0 {
		t.Fatalf("DECODING default: %v %+v", err, f)
	}
}

func TestParseSeconds(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1": 1e9, "8123.000123456": 8123000123456, "1.5": 1500000000,
		"1700000000.123456789123": 1700000000123456789, "2e3": 2000e9, "0.000000001": 1,
	} {
		got, ok := parseSeconds(in)
		if !ok || got != want {
			t.Errorf("parseSeconds(%q) = %d %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1.2.3", "abc", "1.x", "99999999999", "NaN"} {
		if _, ok := parseSeconds(in); ok {
			t.Errorf("parseSeconds(%q) ok", in)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	for ns, want := range map[int64]string{0: "0.000000000", 1: "0.000000001", 1_700_000_000_123_000_000: "1700000000.123000000"} {
		if got := string(appendSeconds(nil, ns)); got != want {
			t.Errorf("appendSeconds(%d) = %s, want %s", ns, got, want)
		}
	}
}

func TestContainsFold(t *testing.T) {
	if !containsFold([]byte(`{"type":"HeLLo"}`), helloName) || containsFold([]byte(`{"type":"help"}`), helloName) {
		t.Fatal("containsFold")
	}
	if !bytes.Contains([]byte(`{"mono_ts":1}`), monoKey) {
		t.Fatal("monoKey")
	}
}

// TestDecodeFrameHugeCounts: a count past the tracker's limit reaches it as
// sent (up to the most an int holds), so its absurd_count rejection names
// the number the producer sent, not the limit plus one.
func TestDecodeFrameHugeCounts(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, v := range []int{1 << 31, 1 << 40} {
		u := otelstats.Update{RequestID: "r", Kind: otelstats.KindInputProcessed, Time: t0, NumPromptTokens: v}
		f, _, err := DecodeFrame(AppendUpdate(nil, &u, Stamp{Ns: t0.UnixNano()}), DefaultMaxFrame)
		if err != nil || f.Update.NumPromptTokens != v {
			t.Fatalf("count %d decoded as %d (%v)", v, f.Update.NumPromptTokens, err)
		}
		tr, _ := otelstats.NewTracker()
		_ = tr.Record(otelstats.Update{RequestID: "r", Kind: otelstats.KindArrived, Time: t0, Model: "m"})
		f.Update.Time = t0
		err = tr.Record(f.Update)
		if want := strconv.Itoa(v); !errors.Is(err, otelstats.ReasonAbsurdCount) || !strings.Contains(err.Error(), want) {
			t.Errorf("count %d: %v, want absurd_count naming %s", v, err, want)
		}
		_ = tr.Shutdown(context.Background())
	}
	if got := count(math.MaxUint64); got != math.MaxInt {
		t.Errorf("count(2^64-1) = %d, want the most an int holds", got)
	}
}
