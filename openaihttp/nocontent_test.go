package openaihttp_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/llmtrace/llmtrace/otelstats"
)

// TestNoContentIsNotTruncated: a 204 or 304 has no body (RFC 9110), so
// the response is whole at its header, streamed or not: the client got
// everything it was sent (the OpenAI SDKs read an empty stream, no
// error), and nothing was cut. The request ends as a response without a
// finish reason does, "stop" with no output and no error, not as a
// response_truncated. A 200 with an empty body to a stream request is
// still truncated: that one promised a stream.
func TestNoContentIsNotTruncated(t *testing.T) {
	for _, tc := range []struct {
		status      int
		ctype, req  string
		finish, err string
	}{
		{204, "", `{"model":"m","stream":true}`, otelstats.FinishStop, ""},
		{204, "", `{"model":"m"}`, otelstats.FinishStop, ""},
		{204, "text/event-stream", `{"model":"m","stream":true}`, otelstats.FinishStop, ""},
		{204, "application/json", `{"model":"m"}`, otelstats.FinishStop, ""},
		{304, "", `{"model":"m","stream":true}`, otelstats.FinishStop, ""},
		{200, "", `{"model":"m","stream":true}`, otelstats.FinishError, "response_truncated"},
	} {
		up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if tc.ctype != "" {
				w.Header().Set("Content-Type", tc.ctype)
			} else {
				w.Header()["Content-Type"] = nil
			}
			w.WriteHeader(tc.status)
		})
		t.Run(strconv.Itoa(tc.status)+tc.ctype+tc.req, func(t *testing.T) {
			eachSide(t, up, nil, func(t *testing.T, s side) {
				resp, body := post(t, http.DefaultClient, s.url+"/v1/chat/completions", tc.req)
				if resp.StatusCode != tc.status || len(body) != 0 {
					t.Fatalf("client got %d, %q", resp.StatusCode, body)
				}
				st := s.stats()
				if st.FinishReason != tc.finish || st.ErrorType != tc.err || st.NumOutputTokens != 0 {
					t.Errorf("finish %q/%q, %d output tokens; want %q/%q", st.FinishReason, st.ErrorType, st.NumOutputTokens, tc.finish, tc.err)
				}
				root := s.root(st)
				if want := map[bool]codes.Code{true: codes.Error, false: codes.Unset}[tc.err != ""]; root.Status().Code != want {
					t.Errorf("root status %v, want %v", root.Status().Code, want)
				}
				if v, _ := attr(root, "http.response.status_code"); v.AsInt64() != int64(tc.status) {
					t.Errorf("http.response.status_code %v", v.AsInt64())
				}
			})
		})
	}
}
