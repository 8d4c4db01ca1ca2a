package transport

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTPContentEncoding: a gzip body (Content-Encoding gzip or x-gzip,
// what a log shipper or a Python producer with compression on sends) is
// decompressed and recorded; one cut short or corrupt gets 400 with what
// came before the damage recorded; one that inflates past MaxBody gets
// 413. A coding the collector does not decode is answered 415 with the
// codings it takes (RFC 9110 §15.5.16), not 400 as garbage. A body that
// reads as an encoding is taken whatever its Content-Encoding says (a
// client that writes its charset there).
func TestHTTPContentEncoding(t *testing.T) {
	e := newEnv(t, Config{MaxBody: 1 << 20})
	srv := httptest.NewServer(e.c.Handler())
	defer srv.Close()
	t0 := time.Unix(1_700_000_000, 0).UTC()
	plain := func(id string) []byte {
		var b []byte
		for _, u := range lifecycle(id, t0) {
			b = AppendUpdateJSON(b, &u)
		}
		return b
	}
	gz := func(b []byte) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return z.Bytes()
	}
	deflated := func(b []byte) []byte {
		var z bytes.Buffer
		zw, _ := flate.NewWriter(&z, flate.DefaultCompression)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return z.Bytes()
	}
	cut := gz(plain("cut"))
	cut = cut[:len(cut)-12] // without its last block's end and the trailer
	firstOnly := gz(append(plain("first"), plain("second")...))
	firstOnly[len(firstOnly)-5]++ // a wrong length in the trailer
	for _, tc := range []struct {
		name, coding string
		body         []byte
		code         int
		accept       string
		recorded     string // a request id whose lifecycle must be recorded
	}{
		{"gzip", "gzip", gz(plain("gz")), http.StatusAccepted, "", "gz"},
		{"x-gzip", "x-gzip", gz(plain("xgz")), http.StatusAccepted, "", "xgz"},
		{"gzip, two members", "GZIP", append(gz(plain("m1")), gz(plain("m2"))...), http.StatusAccepted, "", "m2"},
		{"gzip, cut short", "gzip", cut, http.StatusBadRequest, "", ""},
		{"gzip, corrupt trailer: what came before is recorded", "gzip", firstOnly, http.StatusBadRequest, "", "second"},
		{"gzip header, plain body", "gzip", plain("nogz"), http.StatusBadRequest, "", ""},
		{"gzip bomb", "gzip", gz([]byte(strings.Repeat("\n", 4<<20))), http.StatusRequestEntityTooLarge, "", ""},
		{"deflate", "deflate", deflated(plain("df")), http.StatusUnsupportedMediaType, "gzip, identity", ""},
		{"gzip twice", "gzip, gzip", gz(gz(plain("gg"))), http.StatusUnsupportedMediaType, "gzip, identity", ""},
		{"garbage without a coding", "", []byte("\x00garbage"), http.StatusBadRequest, "", ""},
		{"identity", "identity", []byte("\x00garbage"), http.StatusBadRequest, "", ""},
		{"plain body, charset in Content-Encoding", "utf-8", plain("cs"), http.StatusAccepted, "", "cs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/updates", bytes.NewReader(tc.body))
			if tc.coding != "" {
				req.Header.Set("Content-Encoding", tc.coding)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				StreamStats
				Error string `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if resp.StatusCode != tc.code || resp.Header.Get("Accept-Encoding") != tc.accept {
				t.Errorf("%d, Accept-Encoding %q; want %d, %q (%+v)", resp.StatusCode, resp.Header.Get("Accept-Encoding"), tc.code, tc.accept, st)
			}
			// A body cut short or corrupt is told why.
			if tc.code == http.StatusBadRequest && tc.coding == "gzip" && !strings.Contains(st.Error, "gzip-compressed input") {
				t.Errorf("error %q, want the gzip damage named", st.Error)
			}
			if tc.recorded != "" {
				checkLifecycle(t, e.waitStat(tc.recorded), t0)
			}
		})
	}
}
