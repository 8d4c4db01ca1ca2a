package openaihttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmtrace/llmtrace/openaihttp"
)

// The proxy appends the client's address to an incoming X-Forwarded-For,
// as httputil.ReverseProxy's Director form does, and keeps the incoming
// X-Forwarded-Host and -Proto (a load balancer in front knows what the
// client used); a public endpoint's callers are not trusted, so there the
// chain starts at the caller and Host and Proto are this hop's.
func TestProxyXForwardedFor(t *testing.T) {
	for _, public := range []bool{false, true} {
		var mu sync.Mutex
		var got []http.Header
		var popts []openaihttp.Option
		if public {
			popts = append(popts, openaihttp.WithPublicEndpoint())
		}
		h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			got = append(got, r.Header.Clone())
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`)
		}), popts)
		hdr := []string{"X-Forwarded-For", "203.0.113.7, 10.0.0.2", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "api.example.com"}
		resp := h.post(context.Background(), "/v1/chat/completions", `{"model":"m","messages":[]}`, hdr...)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/models", nil) // untraced
		for i := 0; i < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		proxyHost := strings.TrimPrefix(h.srv.URL, "http://")
		wantXFF, wantProto, wantHost := "203.0.113.7, 10.0.0.2, 127.0.0.1", "https", "api.example.com"
		if public {
			wantXFF, wantProto, wantHost = "127.0.0.1", "http", proxyHost
		}
		mu.Lock()
		for i, g := range got {
			if xff := strings.Join(g.Values("X-Forwarded-For"), ", "); xff != wantXFF {
				t.Errorf("public %v, request %d: upstream X-Forwarded-For %q, want %q", public, i, xff, wantXFF)
			}
			if p, hst := g.Get("X-Forwarded-Proto"), g.Get("X-Forwarded-Host"); p != wantProto || hst != wantHost {
				t.Errorf("public %v, request %d: upstream X-Forwarded-Proto %q, -Host %q; want %q, %q", public, i, p, hst, wantProto, wantHost)
			}
		}
		if len(got) != 2 {
			t.Errorf("upstream got %d requests, want 2", len(got))
		}
		mu.Unlock()
	}
}
