package transport

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestClockExtremesAreRejected: HELLO and update times anywhere in int64's
// range never overflow into a time the tracker accepts; every one of them is
// rejected as bad_timestamp and counted, and the stream goes on.
func TestClockExtremesAreRejected(t *testing.T) {
	now := time.Now()
	good := func(id string) otelstats.Update {
		return otelstats.Update{RequestID: id, Kind: otelstats.KindArrived, Model: "m"}
	}
	cases := []struct {
		name  string
		align bool
		hello Hello
		stamp Stamp
	}{
		{"mono sum past MaxInt64", false, Hello{WallNs: math.MaxInt64, MonoNs: 0}, Stamp{Ns: math.MaxInt64, Mono: true}},
		{"mono far before the anchor", false, Hello{WallNs: now.UnixNano(), MonoNs: math.MaxInt64}, Stamp{Ns: 0, Mono: true}},
		{"anchor past 2200", false, Hello{WallNs: math.MaxInt64, MonoNs: 5}, Stamp{Ns: 5, Mono: true}},
		{"aligned wall stamp past MaxInt64", true, Hello{WallNs: 1, MonoNs: 0}, Stamp{Ns: math.MaxInt64}},
		{"aligned mono sum past MaxInt64", true, Hello{WallNs: 1, MonoNs: 0}, Stamp{Ns: math.MaxInt64, Mono: true}},
		{"aligned anchor at MaxInt64", true, Hello{WallNs: math.MaxInt64, MonoNs: 0}, Stamp{Ns: 1, Mono: true}},
		{"wall stamp past 2200", false, Hello{WallNs: 1, MonoNs: 0}, Stamp{Ns: math.MaxInt64}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Config{AlignClocks: tc.align})
			b := AppendHello(AppendHeader(nil), tc.hello)
			u := good("x")
			b = AppendUpdate(b, &u, tc.stamp)
			st := e.c.ServeStream(bytes.NewReader(b), "extreme")
			if st.Updates != 0 || st.Rejected != 1 {
				t.Errorf("stream %+v: the update was not rejected", st)
			}
			if n := e.rejected(otelstats.ReasonBadTimestamp); n != 1 {
				t.Errorf("bad_timestamp counted %d times, want 1", n)
			}
			if e.tr.InFlight() != 0 {
				t.Errorf("a request with an overflowed time is in flight")
			}
		})
	}
}

// TestClockJSONExtremes: the same through JSON lines, whose seconds are
// decimal text.
func TestClockJSONExtremes(t *testing.T) {
	e := newEnv(t, Config{AlignClocks: true})
	// The anchor is the latest wall time JSON seconds can carry (2262).
	in := `{"type":"HELLO","producer":"x","wall_ts":9223372035.5,"mono_ts":0}` + "\n" +
		`{"request_id":"j","type":"ARRIVED","model":"m","mono_ts":9223372035.5}` + "\n" +
		`{"request_id":"k","type":"ARRIVED","model":"m","ts":1700000000}` + "\n"
	st := e.c.ServeStream(bytes.NewReader([]byte(in)), "json-extreme")
	if st.Updates != 0 || st.Rejected != 2 {
		t.Errorf("stream %+v, want both updates rejected", st)
	}
}

func FuzzStreamClock(f *testing.F) {
	f.Add(int64(math.MaxInt64), int64(0), int64(math.MaxInt64), true, int64(0), true)
	f.Add(int64(1), int64(math.MaxInt64), int64(0), true, int64(1_700_000_000_000_000_000), false)
	f.Fuzz(func(t *testing.T, wall, mono, ns int64, isMono bool, recv int64, align bool) {
		if wall <= 0 || mono < 0 || ns < 0 || recv < 0 {
			return // the decoders never produce these
		}
		var c streamClock
		c.hello(Hello{WallNs: wall, MonoNs: mono}, recv, align)
		got, e := c.mapNs(Stamp{Ns: ns, Mono: isMono})
		if e == clockOK && (got <= 0 || got > maxWallNs) {
			t.Fatalf("mapped to %d, outside (0, %d]", got, maxWallNs)
		}
		// The exact result, where it exists, is what big arithmetic gives.
		want := float64(ns)
		if isMono {
			want = float64(wall) + float64(ns) - float64(mono)
		}
		if align {
			want += float64(recv) - float64(wall)
		}
		if e == clockOK && math.Abs(float64(got)-want) > 1e4 {
			t.Fatalf("mapped to %d, want about %g", got, want)
		}
		if e != clockOK && want > 1e10 && want < float64(maxWallNs)-1e10 {
			t.Fatalf("rejected %g, which is in range", want)
		}
	})
}
