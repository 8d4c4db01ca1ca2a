package transport

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// pythonLine is u as a Python producer's json.dumps of a dataclass with
// both time fields writes it: the one it does not use is null.
func pythonLine(u *otelstats.Update, mono float64, useMono bool) []byte {
	line := bytes.TrimSpace(AppendUpdateJSON(nil, u))
	if !useMono {
		return append(line[:len(line)-1], `, "mono_ts": null}`+"\n"...)
	}
	i := bytes.Index(line, []byte(`"ts":`))
	j := i + bytes.IndexByte(line[i:], ',')
	out := append([]byte{}, line[:i]...)
	out = append(out, fmt.Sprintf(`"ts": null, "mono_ts": %.9f`, mono)...)
	out = append(out, line[j:]...)
	return append(out, '\n')
}

// A line whose ts is null carries its time in mono_ts: Python's json.dumps
// writes None as null, and such lines were rejected as bad_timestamp ("ts
// is required"), so an engine's whole side of every request was lost.
func TestJSONNullTSWithMonoTS(t *testing.T) {
	e := newEnv(t, Config{})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var b bytes.Buffer
	b.WriteString(`{"type": "HELLO", "producer": "py", "wall_ts": 1700000000.0, "mono_ts": 100.0, "side": null}` + "\n")
	for _, u := range lifecycle("py1", t0) {
		engine := u.Kind == otelstats.KindQueued || u.Kind == otelstats.KindPrefilling || u.Kind == otelstats.KindDecoding
		b.Write(pythonLine(&u, 100+u.Time.Sub(t0).Seconds(), engine))
	}
	st := e.c.ServeStream(&b, "py")
	s := e.waitStat("py1")
	checkLifecycle(t, s, t0)
	checkLifecycleTimes(t, s)
	if st.Updates != 10 || st.Rejected != 0 || st.Malformed != 0 {
		t.Errorf("stream stats %+v", st)
	}
}
