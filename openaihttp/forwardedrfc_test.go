package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// TestProxyForwardedHeader: a load balancer that says where the client
// came from in RFC 7239's Forwarded (Envoy, nginx configured so) is heard
// upstream as httputil.ReverseProxy's Director form lets it through, on
// traced and untraced paths alike; ReverseProxy's Rewrite form strips it
// before Rewrite runs. A public endpoint's untrusted callers pass none on.
func TestProxyForwardedHeader(t *testing.T) {
	const fwd = "for=203.0.113.7;proto=https;host=api.example.com"
	for _, public := range []bool{false, true} {
		var mu sync.Mutex
		var got []string
		var popts []openaihttp.Option
		if public {
			popts = append(popts, openaihttp.WithPublicEndpoint())
		}
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			got = append(got, r.Header.Get("Forwarded"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`)
		}), popts)
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","messages":[]}`, "Forwarded", fwd)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/models", nil) // untraced
		req.Header.Set("Forwarded", fwd)
		if resp, err := http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		want := fwd
		if public {
			want = ""
		}
		mu.Lock()
		for i, g := range got {
			if g != want {
				t.Errorf("public %v, request %d: upstream Forwarded %q, want %q", public, i, g, want)
			}
		}
		if len(got) != 2 {
			t.Errorf("public %v: upstream saw %d requests, want 2", public, len(got))
		}
		mu.Unlock()
	}
}
