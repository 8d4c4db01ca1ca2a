package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestAppendUpdateJSONIsJSON: every string a line carries is written as
// JSON, so ParseUpdate reads it back. The build before wrote Go's quoting
// (strconv.AppendQuote): a control character or a rune Go does not print
// came out as \x01, \a or \U000e0001, which no JSON reader takes, and a
// JSON Producer lost the update, an ARRIVED with its whole request, for a
// model name the client chose.
func TestAppendUpdateJSONIsJSON(t *testing.T) {
	for _, s := range []string{"a\x01b", "bell\a", "tab\tnl\nquote\"back\\", "del\x7f", "tag\U000E0001", "ok é 😀", "\u2028"} {
		u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "id" + s, Model: "m" + s,
			Operation: "chat", Time: time.Unix(1700000000, 0).UTC()}
		v, err := ParseUpdate(AppendUpdateJSON(nil, &u))
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		if v.RequestID != u.RequestID || v.Model != u.Model {
			t.Errorf("%q: read back id %q, model %q", s, v.RequestID, v.Model)
		}
	}
}

// TestAppendUpdateJSONInvalidUTF8: a model that is not UTF-8 is read back
// with U+FFFD, as the tracker would clean it; a request id that is not
// UTF-8 is refused as malformed, as the update log refuses it, rather than
// read back as another id.
func TestAppendUpdateJSONInvalidUTF8(t *testing.T) {
	u := otelstats.Update{Kind: otelstats.KindArrived, RequestID: "r", Model: "m\xff", Time: time.Unix(1700000000, 0).UTC()}
	v, err := ParseUpdate(AppendUpdateJSON(nil, &u))
	if err != nil || v.Model != "m\uFFFD" {
		t.Errorf("model read back %q, %v; want \"m\\uFFFD\"", v.Model, err)
	}
	u.RequestID = "r\xff"
	_, err = ParseUpdate(AppendUpdateJSON(nil, &u))
	if !errors.Is(err, otelstats.ReasonMalformed) {
		t.Errorf("an id that is not UTF-8: %v; want malformed", err)
	}
	u.RequestID, u.Scope = "r", "t\xfe"
	_, err = ParseUpdate(AppendUpdateJSON(nil, &u))
	if !errors.Is(err, otelstats.ReasonMalformed) {
		t.Errorf("a scope that is not UTF-8: %v; want malformed", err)
	}
}
