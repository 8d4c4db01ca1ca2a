package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// longUpdates is a request whose client and engine sent long strings: a
// 5,000-byte model, a 5 MiB stop string among twelve, a 10 KiB error type.
// In process the tracker cuts each and counts the cut; nothing of the
// request is lost.
func longUpdates(id string, t0 time.Time) []otelstats.Update {
	us := lifecycle(id, t0)
	us[0].Model = strings.Repeat("m", 5000)
	stops := []string{strings.Repeat("s", 5<<20)}
	for i := range 11 {
		stops = append(stops, fmt.Sprint("stop", i))
	}
	us[1].Sampling = &otelstats.SamplingParams{Stop: stops}
	for i := len(us) - 2; i < len(us); i++ {
		us[i].FinishReason, us[i].ErrorType = "error", strings.Repeat("e", 10<<10)
	}
	return us
}

// TestLongStringsReachTheTracker: strings longer than the tracker keeps
// reach it through a Producer, in either encoding, and it cuts and counts
// them as it does in process. The build before lost them: the binary
// decoder refused a string over 4 KiB as a malformed frame (the ARRIVED
// with its 5,000-byte model, so the whole request), and the producer
// dropped the INPUT_PROCESSED whose stop string made it larger than a
// collector takes (its prompt count with it).
func TestLongStringsReachTheTracker(t *testing.T) {
	for _, json := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", json), func(t *testing.T) {
			e := newEnv(t, Config{})
			p, err := NewProducer(ProducerConfig{Addr: "unix:" + e.sock, JSON: json})
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range longUpdates("long", time.Now()) {
				p.Send(u)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.Dropped != 0 || st.Sent != 10 {
				t.Errorf("producer %+v; want 10 sent, none dropped", st)
			}
			s := e.waitStat("long")
			if s.Model != strings.Repeat("m", otelstats.MaxModelLength) || s.NumPromptTokens.N != 10 || s.FinishReason != "error" {
				t.Errorf("model %d bytes, %d prompt tokens, finish %q; want the model cut at %d, 10, error",
					len(s.Model), s.NumPromptTokens.N, s.FinishReason, otelstats.MaxModelLength)
			}
			if cs := e.c.Stats(); cs.Malformed != 0 || cs.Rejected != 0 {
				t.Errorf("collector %+v; want nothing malformed or rejected", cs)
			}
			if n := e.counter("llm.attributes.truncated"); n == 0 {
				t.Error("no cut counted")
			}
		})
	}
}

// TestDecodeCutsLongStrings: a producer in another language may send any
// string its frame holds; the decoder cuts it (the build before refused a
// frame with a string over 4 KiB as malformed), and both encodings give
// the tracker the same update.
func TestDecodeCutsLongStrings(t *testing.T) {
	u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "r", Model: strings.Repeat("é", 3000),
		LoRAAdapter: strings.Repeat("\x80", 5000), Sampling: &otelstats.SamplingParams{Stop: []string{strings.Repeat("s", 9000)}}}
	u.Time = time.Unix(1700000000, 0).UTC()
	f, _, err := DecodeFrame(AppendUpdate(nil, &u, Stamp{Ns: u.Time.UnixNano()}), DefaultMaxFrame)
	if err != nil || f.Reject != nil {
		t.Fatalf("DecodeFrame: %v, %v", err, f.Reject)
	}
	got := f.Update
	if len(got.Model) != maxString || !strings.HasPrefix(u.Model, got.Model) || len(got.LoRAAdapter) != maxString ||
		len(got.Sampling.Stop[0]) != maxStopString {
		t.Errorf("model %d bytes, adapter %d, stop %d; want %d, %d (cut, never emptied by invalid bytes), %d",
			len(got.Model), len(got.LoRAAdapter), len(got.Sampling.Stop[0]), maxString, maxString, maxStopString)
	}
	u.LoRAAdapter = "" // JSON has no way to carry invalid UTF-8
	line, err := ParseUpdate(AppendUpdateJSON(nil, &u))
	if err != nil {
		t.Fatal(err)
	}
	if line.Model != got.Model || line.Sampling.Stop[0] != got.Sampling.Stop[0] {
		t.Error("the JSON line and the frame give different updates")
	}
	if len(u.Sampling.Stop[0]) != 9000 {
		t.Error("the caller's sampling params were changed")
	}
}

// TestCut: a cut never lands inside a UTF-8 sequence of a valid string,
// and never walks back more than one sequence.
func TestCut(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"aé", 2, "a"},
		{"\x80\x80\x80\x80\x80\x80", 4, "\x80\x80\x80\x80"},
	} {
		if got := cut(c.s, c.n); got != c.want {
			t.Errorf("cut(%q, %d) = %q; want %q", c.s, c.n, got, c.want)
		}
	}
}

// TestHelloLongProducerName: a binary HELLO whose producer name is longer
// than MaxProducerName anchors its stream, the name cut; the build before
// refused it as malformed, and every monotonic time after it had no
// anchor.
func TestHelloLongProducerName(t *testing.T) {
	b := AppendHeader(nil)
	start := len(b)
	b = append(b, 0, 0, 0, 0, FrameHello)
	b = binary.AppendUvarint(b, 1_700_000_000_000_000_000)
	b = binary.AppendUvarint(b, 5)
	b = appendString(b, strings.Repeat("p", 300))
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "r", Model: "m"}
	b = AppendUpdate(b, &u, Stamp{Ns: 6, Mono: true})
	e := newEnv(t, Config{})
	st := e.c.ServeStream(bytes.NewReader(b), "test")
	if st.Hellos != 1 || st.Updates != 1 || st.NoAnchor != 0 || st.Producer != strings.Repeat("p", MaxProducerName) {
		t.Errorf("%+v; want the HELLO, its name cut, and the update anchored", st)
	}
}
