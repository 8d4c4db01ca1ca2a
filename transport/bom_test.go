package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestJSONStreamWithBOM: a JSON-lines stream saved by an editor that
// writes a byte order mark (collect -listen - < updates.jsonl) is read
// as the update log is, the mark skipped; the build before ended the
// whole stream as garbage at its first byte.
func TestJSONStreamWithBOM(t *testing.T) {
	e := newEnv(t, Config{})
	var b bytes.Buffer
	b.Write(utf8BOM)
	b.WriteString(`{"type":"HELLO","producer":"p","wall_ts":1700000000,"mono_ts":10}` + "\n")
	u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "bom", Model: "m", Time: time.Unix(1700000000, 0)}
	b.Write(AppendUpdateJSON(nil, &u))
	b.WriteString(`{"request_id":"bom","type":"QUEUED","mono_ts":10.5}` + "\n")
	st := e.c.ServeStream(&b, "stdin")
	if st.Garbage != 0 || st.Hellos != 1 || st.Updates != 2 || st.NoAnchor != 0 || st.Encoding != "json" {
		t.Errorf("%+v; want JSON lines: the HELLO and two updates", st)
	}
	// Bytes that only begin like a mark are still garbage.
	if st := e.c.ServeStream(bytes.NewReader([]byte("\xef\x00{}\n")), "x"); st.Garbage != 1 {
		t.Errorf("%+v; want garbage", st)
	}
}
