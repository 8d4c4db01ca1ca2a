package testbackend

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

const fixedExposition = `# HELP llmtrace_testbackend_requests_total Requests seen.
# TYPE llmtrace_testbackend_requests_total counter
llmtrace_testbackend_requests_total{model="tiny",finish_reason="stop"} 42
llmtrace_testbackend_requests_total{model="tiny",finish_reason="length"} 3
# HELP llmtrace_testbackend_queue_depth Waiting requests.
# TYPE llmtrace_testbackend_queue_depth gauge
llmtrace_testbackend_queue_depth 1.5
`

// Prometheus really scrapes an in-test endpoint and answers PromQL about it.
func TestPrometheusScrapesAndQueries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, fixedExposition)
	}))
	t.Cleanup(srv.Close)

	prom := StartPrometheus(t, []string{srv.Listener.Addr().String()}, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	got, err := prom.WaitForSeries(ctx, `llmtrace_testbackend_requests_total`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("want 2 series, got %+v", got)
	}
	// Sorted by labels: finish_reason="length" before "stop".
	if got[0].Labels["finish_reason"] != "length" || got[0].Value != 3 ||
		got[1].Labels["finish_reason"] != "stop" || got[1].Value != 42 {
		t.Errorf("series = %+v", got)
	}
	for _, s := range got {
		if s.Labels["job"] != "llmtrace" || s.Labels["instance"] != srv.Listener.Addr().String() || s.Labels["model"] != "tiny" {
			t.Errorf("labels = %v", s.Labels)
		}
	}

	sum, err := prom.QueryValue(ctx, `sum(llmtrace_testbackend_requests_total)`)
	if err != nil || sum != 45 {
		t.Errorf("sum = %v, %v; want 45", sum, err)
	}
	gauge, err := prom.QueryValue(ctx, `llmtrace_testbackend_queue_depth`)
	if err != nil || gauge != 1.5 {
		t.Errorf("gauge = %v, %v; want 1.5", gauge, err)
	}
	up, err := prom.QueryValue(ctx, `up{job="llmtrace"}`)
	if err != nil || up != 1 {
		t.Errorf("up = %v, %v; want 1", up, err)
	}
	scalar, err := prom.QueryValue(ctx, `scalar(llmtrace_testbackend_queue_depth) * 2`)
	if err != nil || scalar != 3 {
		t.Errorf("scalar = %v, %v; want 3", scalar, err)
	}
	if _, err := prom.Query(ctx, `sum(`); err == nil {
		t.Error("a malformed query returned no error")
	}
	none, err := prom.Query(ctx, `llmtrace_testbackend_no_such_metric`)
	if err != nil || len(none) != 0 {
		t.Errorf("absent metric = %+v, %v; want no series", none, err)
	}
}
