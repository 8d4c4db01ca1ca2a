package openaihttp

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

// TestInflateStopsAtObjectEnd: a compressed response is inflated as far as
// its JSON object goes, not on through what follows it (here 32 MiB of
// blanks, 32 KiB of gzip, which inflating whole cost some 25 ms a
// response), and still read whole.
func TestInflateStopsAtObjectEnd(t *testing.T) {
	const obj = `{"id":"c","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":6,"completion_tokens":4}}`
	for _, tc := range []struct {
		name     string
		body     string
		wantRest bool // compressed bytes left unread
	}{
		{"blanks after the object", obj + strings.Repeat(" ", 32<<20), true},
		{"not JSON", "<html>" + strings.Repeat(" ", 32<<20), true},
		{"the object alone", obj, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write([]byte(tc.body))
			_ = zw.Close()
			z := &compressed{coding: codingGzip, buf: buf.Bytes()}
			s := newFieldScanner(newResponseFields(16<<20), nil)
			src := bytes.NewReader(z.buf)
			if !z.inflateFrom(src, s) {
				t.Fatal("not read")
			}
			if got := src.Len() > 0; got != tc.wantRest {
				t.Errorf("%d of %d compressed bytes left unread, want some left: %v", src.Len(), len(z.buf), tc.wantRest)
			}
			if strings.HasPrefix(tc.body, "{") && !s.complete() {
				t.Error("the object was not read whole")
			}
		})
	}
}
