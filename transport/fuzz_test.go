package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

// FuzzDecodeFrame feeds arbitrary bytes to the binary decoder: it must never
// panic, must report a length within the input, and whatever decodes must
// encode back to a frame that decodes the same.
func FuzzDecodeFrame(f *testing.F) {
	f.Add(AppendHello(nil, Hello{Producer: "engine-0", WallNs: 1_700_000_000_000_000_000, MonoNs: 5}))
	ups := sampleUpdates()
	for i := range ups {
		f.Add(AppendUpdate(nil, &ups[i], Stamp{Ns: int64(i) * 1e6, Mono: i%2 == 1}))
	}
	f.Add(frame(0x7E, 1, 2, 3))
	f.Add(frame(FrameUpdate, 3, 2, 7, 1, 'r', 0x3F, 0x80, 0x01, 0x7F, 2, 'h', 'i'))
	f.Add(frame(FrameUpdate, 2, 0, 1, 1, 'r', 0x45, 4, '{', '}', ' ', ' '))
	f.Add(frame(FrameUpdate, 6, 0, 1, 1, 'r', 0x04, 0))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0x02})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 3, 2, 0x80})
	f.Add([]byte("LLMT\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := DecodeFrame(b, DefaultMaxFrame)
		if n < 0 || n > len(b) {
			t.Fatalf("n = %d for %d bytes", n, len(b))
		}
		switch {
		case errors.Is(err, ErrIncomplete), errors.Is(err, ErrFrameSize):
			if n != 0 {
				t.Fatalf("n = %d with %v", n, err)
			}
			return
		case errors.Is(err, ErrMalformed):
			return
		case err != nil:
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		if l, _ := FrameLen(b, DefaultMaxFrame); n != 4+l {
			t.Fatalf("n = %d, frame length %d", n, l)
		}
		var again []byte
		switch fr.Type {
		case FrameHello:
			again = AppendHello(nil, fr.Hello)
		case FrameUpdate:
			if fr.Reject != nil {
				return
			}
			again = AppendUpdate(nil, &fr.Update, fr.Stamp)
		default:
			return
		}
		fr2, n2, err := DecodeFrame(again, DefaultMaxFrame)
		if err != nil || n2 != len(again) {
			t.Fatalf("re-encoded frame: %v (n=%d of %d)", err, n2, len(again))
		}
		normalize(&fr)
		normalize(&fr2)
		if !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", fr2, fr)
		}
	})
}

// normalize makes sampling params that encode alike compare alike.
func normalize(f *Frame) {
	if sp := f.Update.Sampling; sp != nil {
		b, _ := json.Marshal(sp)
		if string(b) == "{}" {
			f.Update.Sampling = nil
			return
		}
		var c otelstats.SamplingParams
		_ = json.Unmarshal(b, &c)
		f.Update.Sampling = &c
	}
}

// FuzzServeStream feeds arbitrary streams to a collector: whatever the
// bytes, it must neither panic nor count an update twice.
func FuzzServeStream(f *testing.F) {
	t0 := time.Unix(1_700_000_000, 0)
	bin := AppendHello(AppendHeader(nil), Hello{Producer: "p", WallNs: t0.UnixNano(), MonoNs: 10})
	var js []byte
	js = append(js, `{"type":"HELLO","producer":"p","wall_ts":1700000000,"mono_ts":10}`+"\n"...)
	for _, u := range lifecycle("f", t0) {
		bin = AppendUpdate(bin, &u, Stamp{Ns: u.Time.UnixNano() - t0.UnixNano() + 10, Mono: true})
		js = AppendUpdateJSON(js, &u)
	}
	f.Add(bin)
	f.Add(js)
	f.Add(bin[:len(bin)/2])
	f.Add(js[:len(js)/2])
	f.Add([]byte("LLMT\x01\x00\x00\x00\x02\x02\x06"))
	f.Add([]byte(`{"request_id":"x","type":"QUEUED","mono_ts":1e3}` + "\n"))
	// What Python's json.dumps writes: null for an unset field, NaN, lone
	// surrogate escapes, CRLF, and a last line without its newline.
	f.Add([]byte(`{"type": "HELLO", "producer": "py", "wall_ts": 1700000000.0, "mono_ts": 10.0, "side": null}` + "\r\n" +
		`{"request_id": "p\ud800", "type": "QUEUED", "ts": null, "mono_ts": 10.5}` + "\r\n" +
		`{"request_id": "p", "type": "DETOKENIZED", "ts": 1700000000.5, "num_new_tokens": 1, "busy_time_s": NaN}`))
	tr, err := otelstats.NewTracker(otelstats.WithMeterProvider(noop.NewMeterProvider()))
	if err != nil {
		f.Fatal(err)
	}
	c, err := NewCollector(Config{Tracker: tr, MaxFrame: 1024, MaxLine: 1024})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = tr.Shutdown(context.Background())
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		before := c.Stats()
		st := c.ServeStream(bytes.NewReader(b), "fuzz")
		after := c.Stats()
		if st.Updates < 0 || st.Updates > int64(len(b)) || after.Updates-before.Updates != st.Updates {
			t.Fatalf("updates %d for %d bytes (collector %d → %d)", st.Updates, len(b), before.Updates, after.Updates)
		}
	})
}
