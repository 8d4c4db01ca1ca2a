package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// TestCollectSkewedProducer: one producer's clock runs 15 minutes ahead
// (issue 12.3). Its updates are rejected as bad_timestamp — they are
// further ahead of collect's own clock than the bound — and they move
// nothing: the other producers' requests in flight are not ended as
// abandoned, and their real FINISHED is accepted. (Before, its one update
// advanced the sweep's high-water mark past everyone's TTL.) With
// -align-clocks the same producer is mapped onto collect's clock at its
// HELLO, and its request is recorded.
func TestCollectSkewedProducer(t *testing.T) {
	for _, align := range []bool{false, true} {
		t.Run(fmt.Sprint("align-clocks=", align), func(t *testing.T) {
			sock := filepath.Join(shortDir(t), "c.sock")
			args := []string{"-listen", "unix:" + sock}
			if align {
				args = append(args, "-align-clocks")
			}
			c := startCollect(t, noExport(), args...)
			honest, err := transport.NewProducer(transport.ProducerConfig{Addr: "unix:" + sock, Name: "honest"})
			if err != nil {
				t.Fatal(err)
			}
			defer honest.Close(context.Background())
			t0 := time.Now()
			open := lifecycle("honest", t0)
			for _, u := range open[:len(open)-2] { // in flight: not finished
				honest.Send(u)
			}
			// The skewed producer: every time it sends is 15 minutes ahead.
			skewed := produce(t, transport.ProducerConfig{Addr: "unix:" + sock, Name: "skewed", ClockOffset: 15 * time.Minute}, "skewed")
			if skewed.Sent != 10 {
				t.Fatalf("skewed producer %+v", skewed)
			}
			if !align {
				c.waitFor("the skewed updates rejected", func() bool {
					return logInt(c.stderr.String(), "stream ended", "updates") >= 0 // the stream was read
				})
			}
			// The honest request finishes for real, after the skewed
			// producer has come and gone.
			for _, u := range open[len(open)-2:] {
				honest.Send(u)
			}
			s := c.waitStats("honest")["honest"]
			checkComplete(t, "honest", s)
			if s["finish_reason"] != "stop" {
				t.Errorf("honest request ended %v, want stop", s["finish_reason"])
			}
			honest.Close(context.Background())
			if align {
				checkComplete(t, "skewed", c.waitStats("skewed")["skewed"])
			}
			n := c.stopped()
			st := readStats(t, c.stats)
			switch {
			case align && n["rejected"] != 0:
				t.Errorf("aligned: counters %v, want nothing rejected", n)
			case !align && st["skewed"] != nil:
				t.Errorf("the skewed producer's request was recorded: %v", st["skewed"])
			case !align && n["rejected"] < 1:
				t.Errorf("counters %v: the skewed updates were not rejected", n)
			}
			for id, r := range st {
				if r["finish_reason"] == otelstats.FinishAbandoned {
					t.Errorf("%s ended abandoned", id)
				}
			}
		})
	}
}
