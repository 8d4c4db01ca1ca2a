package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmtrace/llmtrace/otelstats"
)

// wireVia records us in a fresh tracker as given (via "go"), or written by
// the Producer's encoders and read back as the collector reads them: as
// update-log lines ("json") or binary frames ("bin"). It returns each
// request's stats as JSON (without the random ids) and each update's
// outcome: nil, or the reason it was rejected for.
func wireVia(t *testing.T, us []otelstats.Update, via string) (map[string]string, []error) {
	t.Helper()
	stats := map[string]string{}
	tr, err := otelstats.NewTracker(otelstats.WithMeterProvider(noop.NewMeterProvider()),
		otelstats.WithOnFinish(func(s *otelstats.RequestStats) {
			s.TraceID, s.SpanID = "", ""
			stats[s.RequestID] = string(s.AppendJSON(nil))
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	out := make([]error, len(us))
	for i := range us {
		u := us[i]
		switch via {
		case "go":
			err = tr.Record(u)
		case "json":
			err = RecordLine(tr, AppendUpdateJSON(nil, &u))
		case "bin":
			f, _, derr := DecodeFrame(AppendUpdate(nil, &u, Stamp{Ns: u.Time.UnixNano()}), DefaultMaxFrame)
			switch {
			case derr != nil:
				err = derr
			case f.Reject != nil:
				err = tr.Reject(f.Reject)
			default:
				f.Update.Time = time.Unix(0, f.Stamp.Ns)
				err = tr.Record(f.Update)
			}
		}
		var re *otelstats.RejectError
		switch {
		case errors.As(err, &re):
			out[i] = re.Reason
		case err != nil:
			out[i] = err
		}
	}
	tr.Flush()
	return stats, out
}

// SPEC §7–9 through the wire: an update a Producer sends reaches the
// collector's tracker as the tracker would have taken it in process. The
// writers left out counts that were not positive, so an update the tracker
// rejects became one it takes: a DECODING with accepted tokens and no draft
// (SPEC §8: accepted ≤ draft, both or neither) became a plain step, a
// negative num_remote_tokens, kv_bytes, num_encoder_tokens, num_new_tokens
// or busy time vanished, a negative num_computed_tokens became 0, and a
// FINISHED with a negative num_output_tokens ended the request. Valid
// updates of every §7–9 kind give the same stats either way.
func TestWireKeepsWhatTheTrackerRejects(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	en := otelstats.SideEngine
	cases := []struct {
		name string
		mid  []otelstats.Update // between QUEUED and the two FINISHED
		bad  bool               // some of mid are rejected in process
	}{
		{"pd", []otelstats.Update{
			{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0", NumRemoteTokens: 80},
			{Kind: otelstats.KindRemoteKVReady, Time: at(10), NumRemoteTokens: 80, KVBytes: 1234, KVStatus: "ok"},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: 100, NumCachedTokens: 10},
			{Kind: otelstats.KindDecoding, Time: at(20)},
			{Kind: otelstats.KindDecoding, Time: at(30), NumDraftTokens: 4, NumAcceptedTokens: 2},
			{Kind: otelstats.KindDecoding, Time: at(40), NumNewTokens: 2, NumDraftTokens: 4, NumAcceptedTokens: 0},
		}, false},
		{"failed transfer", []otelstats.Update{
			{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0"},
			{Kind: otelstats.KindRemoteKVReady, Time: at(10), KVStatus: "failed"},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: 100, NumCachedTokens: 10},
			{Kind: otelstats.KindDecoding, Time: at(20)},
		}, false},
		{"encoder", []otelstats.Update{
			{Kind: otelstats.KindEncoding, Time: at(3), NumItems: 2},
			{Kind: otelstats.KindEncoded, Time: at(5), EncoderCacheHit: true},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: 50, NumCachedTokens: 10},
			{Kind: otelstats.KindEncoding, Time: at(13), NumItems: 1, NumEncoderTokens: 7},
			{Kind: otelstats.KindEncoded, Time: at(15)},
			{Kind: otelstats.KindPrefilling, Time: at(16), NumComputedTokens: 100, NumCachedTokens: 10},
			{Kind: otelstats.KindDecoding, Time: at(20)},
		}, false},
		{"rejected", []otelstats.Update{
			{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0", NumRemoteTokens: -1},
			{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0"},
			{Kind: otelstats.KindRemoteKVReady, Time: at(4), NumRemoteTokens: 5, KVBytes: -5},
			{Kind: otelstats.KindRemoteKVReady, Time: at(4), NumRemoteTokens: -5},
			{Kind: otelstats.KindRemoteKVReady, Time: at(4), NumRemoteTokens: 5},
			{Kind: otelstats.KindEncoding, Time: at(5), NumItems: -1},
			{Kind: otelstats.KindEncoding, Time: at(5), NumItems: 1, NumEncoderTokens: -1},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: -100},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: 100, NumCachedTokens: 10},
			{Kind: otelstats.KindDecoding, Time: at(20), NumNewTokens: -3},
			{Kind: otelstats.KindDecoding, Time: at(21), NumAcceptedTokens: 2},
			{Kind: otelstats.KindDecoding, Time: at(22), NumDraftTokens: -2},
			{Kind: otelstats.KindDecoding, Time: at(23), NumDraftTokens: 2, NumAcceptedTokens: -1},
			{Kind: otelstats.KindDecoding, Time: at(24), NumNewTokens: 1, NumDraftTokens: 2, NumAcceptedTokens: 2},
			{Kind: otelstats.KindDetokenized, Time: at(25), NumNewTokens: 1, Busy: -1},
			{Kind: otelstats.KindFinished, Time: at(26), FinishReason: "stop", NumOutputTokens: -1},
			{Kind: otelstats.KindFinished, Time: at(26), FinishReason: "stop", NumPromptTokens: -1},
		}, true},
		{"stray counts", []otelstats.Update{
			// Counts a kind does not use, which the tracker ignores:
			// written, a negative one would be rejected by the reader.
			{Kind: otelstats.KindRemoteKVWait, Time: at(3), KVSource: "p0", NumPromptTokens: -1, NumDraftTokens: -1, NumAcceptedTokens: 2, Busy: -1},
			{Kind: otelstats.KindRemoteKVReady, Time: at(4), NumRemoteTokens: 5, NumOutputTokens: -1, NumItems: -1, NumEncoderTokens: -1},
			{Kind: otelstats.KindPrefilling, Time: at(12), NumComputedTokens: 100, NumCachedTokens: 10, NumRemoteTokens: -1, KVBytes: -1},
			{Kind: otelstats.KindDecoding, Time: at(20), NumPromptTokens: -1, Busy: -1},
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "r"
			us := []otelstats.Update{
				{RequestID: id, Kind: otelstats.KindArrived, Time: at(0), Model: "m", PDRole: otelstats.PDRoleDecode, LoRAAdapter: "ad"},
				{RequestID: id, Kind: otelstats.KindInputProcessed, Time: at(1), NumPromptTokens: 100},
				{RequestID: id, Kind: otelstats.KindQueued, Time: at(2)},
			}
			for _, u := range c.mid {
				u.RequestID = id
				us = append(us, u)
			}
			us = append(us,
				otelstats.Update{RequestID: id, Kind: otelstats.KindFinished, Side: en, Time: at(90), FinishReason: "stop"},
				otelstats.Update{RequestID: id, Kind: otelstats.KindFinished, Time: at(91), FinishReason: "stop"})
			want, wantErrs := wireVia(t, us, "go")
			rejected := 0
			for _, e := range wantErrs {
				if e != nil {
					rejected++
				}
			}
			if (rejected > 0) != c.bad {
				t.Fatalf("in process: %v", wantErrs)
			}
			for _, via := range []string{"json", "bin"} {
				got, errs := wireVia(t, us, via)
				if got[id] != want[id] {
					t.Errorf("via %s:\n got %s\nwant %s", via, got[id], want[id])
				}
				for i := range us {
					switch w, g := wantErrs[i], errs[i]; {
					case (w == nil) != (g == nil):
						t.Errorf("via %s: update %d (%s) gave %v, in process %v", via, i, us[i].Kind, g, w)
					case via == "json" && w != g:
						// The update log carries the counts as they are:
						// the same reason.
						t.Errorf("via %s: update %d (%s) rejected as %v, in process as %v", via, i, us[i].Kind, g, w)
					}
				}
			}
		})
	}
}
