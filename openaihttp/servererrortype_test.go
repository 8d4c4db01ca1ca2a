package openaihttp_test

import (
	"io"
	"net/http"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestServerDurationErrorTypeOnlyFor5xx: http.server.request.duration
// carries error.type for a 5xx and none for a 4xx, as the HTTP
// conventions (and otelhttp) say of a server: a 4xx is the client's
// error, not the server's. The proxy's http.client.request.duration
// carries it for both (for a client every status ≥ 400 is an error), and
// the request itself still fails with the status code (SPEC §3).
func TestServerDurationErrorTypeOnlyFor5xx(t *testing.T) {
	for _, code := range []int{400, 404, 408, 429, 500, 503} {
		up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error":{"message":"no","type":"BadRequestError","param":null,"code":`+strconv.Itoa(code)+`}}`)
		})
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			eachSide(t, up, nil, func(t *testing.T, s side) {
				resp, _ := post(t, http.DefaultClient, s.url+"/v1/chat/completions", `{"model":"m"}`)
				if resp.StatusCode != code {
					t.Fatalf("status %d", resp.StatusCode)
				}
				st := s.stats()
				if st.ErrorType != strconv.Itoa(code) {
					t.Errorf("request error.type %q, want %d", st.ErrorType, code)
				}
				m := s.metrics()
				want := ""
				if code >= 500 {
					want = strconv.Itoa(code)
				}
				checkErrorType(t, m, "http.server.request.duration", want)
				if _, ok := m["http.client.request.duration"]; ok {
					checkErrorType(t, m, "http.client.request.duration", strconv.Itoa(code))
				}
			})
		})
	}
}

func checkErrorType(t *testing.T, m map[string]metricdata.Aggregation, name, want string) {
	t.Helper()
	pts := histPoints(t, m, name)
	if len(pts) != 1 {
		t.Fatalf("%s: %d points", name, len(pts))
	}
	got, _ := pts[0].Attributes.Value("error.type")
	if got.AsString() != want {
		t.Errorf("%s error.type %q, want %q", name, got.AsString(), want)
	}
}
