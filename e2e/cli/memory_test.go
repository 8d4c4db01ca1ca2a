package cli

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/transport"
)

// midFlight is a request half way through: arrived, tokenized, queued,
// prefilled, one token decoded and delivered — the state most of a busy
// server's requests are in.
func midFlight(id string, t0 time.Time) []otelstats.Update {
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	return []otelstats.Update{
		{RequestID: id, Kind: otelstats.KindArrived, Time: ms(0), Model: "m"},
		{RequestID: id, Kind: otelstats.KindInputProcessed, Time: ms(1), NumPromptTokens: 100},
		{RequestID: id, Kind: otelstats.KindQueued, Time: ms(2)},
		{RequestID: id, Kind: otelstats.KindPrefilling, Time: ms(3), NumComputedTokens: 100, NumCachedTokens: 20},
		{RequestID: id, Kind: otelstats.KindDecoding, Time: ms(4)},
		{RequestID: id, Kind: otelstats.KindDetokenized, Time: ms(5), NumNewTokens: 1},
	}
}

// holdOpen sends n mid-flight requests over conn in batches the
// collector's queue can take, each batch followed by a complete marker
// request whose stats say the batch was recorded (-workers 1 keeps the
// order).
func holdOpen(t *testing.T, c *collector, conn net.Conn, prefix string, n int) {
	t.Helper()
	const batch = 10_000 // 60,000 updates: below the default queue of 65,536
	for done := 0; done < n; {
		var b []byte
		t0 := time.Now()
		k := min(batch, n-done)
		for i := range k {
			for _, u := range midFlight(fmt.Sprintf("%s-%d", prefix, done+i), t0) {
				b = transport.AppendUpdate(b, &u, transport.Stamp{Ns: u.Time.UnixNano()})
			}
		}
		marker := fmt.Sprintf("%s-marker-%d", prefix, done)
		for _, u := range lifecycle(marker, t0) {
			b = transport.AppendUpdate(b, &u, transport.Stamp{Ns: u.Time.UnixNano()})
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		c.waitFinished(marker)
		done += k
	}
}

// TestCollectMemoryPerInFlight measures what one request in flight costs
// collect's resident memory — the figure the default in-flight cap is
// sized from (bytesPerInFlight in cmd/llmtrace/collect.go) — and checks
// that the cap holds the tracker to it: past -max-in-flight, arrivals
// evict the oldest requests instead of growing the heap.
func TestCollectMemoryPerInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 150,000 requests open")
	}
	const n1, n2 = 50_000, 150_000
	dir := shortDir(t)
	sock := filepath.Join(dir, "c.sock")
	c := startCollect(t, noExport(), "-listen", "unix:"+sock, "-workers", "1", "-max-in-flight", "1000000")
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(transport.AppendHeader(nil)); err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	holdOpen(t, c, conn, "a", n1)
	rss1 := rssBytes(t, pid)
	holdOpen(t, c, conn, "b", n2-n1)
	rss2 := rssBytes(t, pid)
	per := float64(rss2-rss1) / float64(n2-n1)
	t.Logf("collect RSS: %.1f MiB with %d requests in flight, %.1f MiB with %d: %.0f bytes per request in flight",
		float64(rss1)/(1<<20), n1, float64(rss2)/(1<<20), n2, per)
	// collect -h states the figure its default cap is sized on.
	_, _, help := run(t, noExport(), "", llmtrace(t), "collect", "-h")
	var stated float64
	if i := strings.Index(help, "over "); i < 0 {
		t.Fatalf("collect -h states no bytes per request:\n%s", help)
	} else {
		fmt.Sscanf(help[i:], "over %g bytes a request", &stated)
	}
	if per <= 0 || per > stated {
		t.Errorf("%.0f bytes per request in flight, more than the %.0f collect sizes its default cap on", per, stated)
	}
	conn.Close()
	n := c.stopped()
	if n["dropped"] != 0 || n["rejected"] != 0 {
		t.Fatalf("final counters %v: the measurement lost updates", n)
	}
}

// TestCollectInFlightCap: with -max-in-flight the tracker never holds more
// than the cap; the oldest requests end as evicted, and memory stays flat.
func TestCollectInFlightCap(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 60,000 requests")
	}
	const limit, n = 5_000, 60_000
	dir := shortDir(t)
	sock := filepath.Join(dir, "c.sock")
	c := startCollect(t, noExport(), "-listen", "unix:"+sock, "-workers", "1", "-max-in-flight", fmt.Sprint(limit))
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(transport.AppendHeader(nil))
	holdOpen(t, c, conn, "c", n)
	s := readStats(t, c.stats)
	evicted := 0
	for _, st := range s {
		if st["finish_reason"] == otelstats.FinishEvicted {
			evicted++
		}
	}
	// Every arrival past the cap evicted one request (the markers count as
	// arrivals too; each finished, freeing its slot).
	if want := n - limit; evicted < want-limit/10 || evicted > n {
		t.Errorf("%d requests evicted, want about %d", evicted, want)
	}
	conn.Close()
	c.stopped()
}
