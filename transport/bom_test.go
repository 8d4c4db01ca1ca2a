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

// TestBOMBeforeLaterHello: a byte order mark before any line is skipped,
// as the update log skips it, so two saved streams concatenated (cat a.jsonl
// b.jsonl | collect -listen -) keep b's HELLO. It was read as an update
// and rejected as unknown_kind, and b's monotonic times were mapped
// through a's anchor, 400 s off, without a word.
func TestBOMBeforeLaterHello(t *testing.T) {
	e := newEnv(t, Config{})
	var b bytes.Buffer
	b.WriteString(`{"type":"HELLO","producer":"a","wall_ts":1700000000,"mono_ts":100}` + "\n")
	b.Write(utf8BOM)
	b.WriteString(`{"type":"HELLO","producer":"b","wall_ts":1700000010,"mono_ts":500}` + "\n")
	u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "cat", Model: "m", Time: time.Unix(1700000010, 0)}
	b.Write(AppendUpdateJSON(nil, &u))
	b.WriteString(`{"request_id":"cat","type":"FINISHED","side":"engine","mono_ts":500.5,"finish_reason":"stop"}` + "\n")
	st := e.c.ServeStream(&b, "stdin")
	if st.Hellos != 2 || st.Updates != 2 || st.Rejected != 0 {
		t.Errorf("%+v; want two HELLOs and two updates", st)
	}
	if s := e.waitStat("cat"); !s.FinishedTime.Equal(time.Unix(1700000010, 5e8)) {
		t.Errorf("finished at %v, want 500.5 s on b's clock, 1700000010.5", s.FinishedTime.Unix())
	}
}
