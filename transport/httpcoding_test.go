package transport

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestHTTPContentEncoding: a body compressed with a content coding the
// collector does not decode is answered 415 with "Accept-Encoding:
// identity" (RFC 9110 §15.5.16), so its producer learns to send it
// uncompressed; it was answered 400, as garbage. A body that reads as an
// encoding is taken whatever its Content-Encoding says (a client that
// writes its charset there).
func TestHTTPContentEncoding(t *testing.T) {
	e := newEnv(t, Config{})
	srv := httptest.NewServer(e.c.Handler())
	defer srv.Close()
	t0 := time.Unix(1_700_000_000, 0).UTC()
	var plain []byte
	for _, u := range lifecycle("ce", t0) {
		plain = AppendUpdateJSON(plain, &u)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	for _, tc := range []struct {
		name, coding string
		body         []byte
		code         int
		accept       string
	}{
		{"gzip", "gzip", gz.Bytes(), http.StatusUnsupportedMediaType, "identity"},
		{"x-gzip", "x-gzip", gz.Bytes(), http.StatusUnsupportedMediaType, "identity"},
		{"garbage without a coding", "", []byte("\x00garbage"), http.StatusBadRequest, ""},
		{"identity", "identity", []byte("\x00garbage"), http.StatusBadRequest, ""},
		{"plain body, charset in Content-Encoding", "utf-8", plain, http.StatusAccepted, ""},
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
			resp.Body.Close()
			if resp.StatusCode != tc.code || resp.Header.Get("Accept-Encoding") != tc.accept {
				t.Errorf("%d, Accept-Encoding %q; want %d, %q", resp.StatusCode, resp.Header.Get("Accept-Encoding"), tc.code, tc.accept)
			}
		})
	}
	checkLifecycle(t, e.waitStat("ce"), t0)
}
