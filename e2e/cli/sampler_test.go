package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestProxyHeadSampler runs `llmtrace proxy` with OTEL_TRACES_SAMPLER as the
// README's table shows it: the head sampler decides when a request
// arrives, the traceparent the upstream gets carries the decision, and
// what the proxy exports agrees — a kept trace whole, a dropped one with no
// span at all. An untrusted caller's sampled flag decides nothing: its
// trace id does, through the ratio.
func TestProxyHeadSampler(t *testing.T) {
	var mu sync.Mutex
	told := map[string]string{} // trace id → the flags the upstream got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if tp := strings.Split(r.Header.Get("Traceparent"), "-"); len(tp) == 4 {
			mu.Lock()
			told[tp[1]] = tp[3]
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, tok := range []string{"a", "b", "c"} {
			fin := "null"
			if i == 2 {
				fin = `"stop"`
			}
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"model\":\"toy\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":%s}]}\n\n", tok, fin)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer up.Close()

	tmp := t.TempDir()
	addr := freeAddr(t)
	p := start(t, noExport("OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.5"), root, llmtrace(t),
		"proxy", "-upstream", up.URL, "-listen", addr, "-models", "toy", "-stats-log", "0",
		"-stats-out", tmp+"/s.jsonl", "-spans-out", tmp+"/spans.jsonl")
	p.waitStderr("msg=proxying")

	// Callers' trace ids a ratio of 0.5 keeps (byte 8 below 0x80) and
	// drops, each sent as sampled: the flag must not decide.
	const keepID, dropID = "0af7651916cd43dd1448eb211c80319c", "0af7651916cd43ddf448eb211c80319c"
	for i := range 24 {
		var hdr []string
		switch i % 3 {
		case 1:
			hdr = []string{"traceparent", fmt.Sprintf("00-%s-%016x-01", keepID, i+1)}
		case 2:
			hdr = []string{"traceparent", fmt.Sprintf("00-%s-%016x-01", dropID, i+1)}
		}
		if code := post(t, "http://"+addr+"/v1/chat/completions", "application/json", []byte(chatBody), hdr...); code != 200 {
			t.Fatalf("chat %d through the proxy: %d", i, code)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if code := p.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}

	spansIn, roots := map[string]int{}, map[string]int{}
	b, err := os.ReadFile(tmp + "/spans.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var s struct {
			TraceID string `json:"trace_id"`
			Parent  string `json:"parent_span_id"`
			Name    string `json:"name"`
		}
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("spans line %q: %v", line, err)
		}
		spansIn[s.TraceID]++
		if s.Name == "chat toy" {
			roots[s.TraceID]++
		}
	}
	stats := readStats(t, tmp+"/s.jsonl")
	if len(stats) != 24 {
		t.Fatalf("%d requests in -stats-out, want 24", len(stats))
	}
	byID := map[string]int{}
	kept := 0
	for id, s := range stats {
		tid, _ := s["trace_id"].(string)
		reason, _ := s["sampling_reason"].(string)
		mu.Lock()
		flags, ok := told[tid]
		mu.Unlock()
		if !ok {
			t.Errorf("%s: trace %s never reached the upstream", id, tid)
			continue
		}
		byID[tid]++
		switch reason {
		case "head":
			kept++
			if flags != "01" || roots[tid] == 0 || spansIn[tid] < 5 {
				t.Errorf("%s: kept, but the upstream got flags %s and %d spans (%d roots) were exported", id, flags, spansIn[tid], roots[tid])
			}
		case "dropped":
			if flags != "00" || spansIn[tid] != 0 {
				t.Errorf("%s: dropped, but the upstream got flags %s and %d spans were exported", id, flags, spansIn[tid])
			}
		default:
			t.Errorf("%s: sampling_reason %q, want head or dropped", id, reason)
		}
	}
	// Eight callers' requests in each of the two traces: the ratio decided
	// by their trace id, whatever their flag said.
	if byID[keepID] != 8 || byID[dropID] != 8 {
		t.Errorf("requests per caller's trace: %d and %d, want 8 and 8", byID[keepID], byID[dropID])
	}
	if told[keepID] != "01" || told[dropID] != "00" || roots[keepID] != 8 || spansIn[dropID] != 0 {
		t.Errorf("callers' traces: upstream flags %s and %s, %d roots in the kept one, %d spans in the dropped one; want 01, 00, 8, 0",
			told[keepID], told[dropID], roots[keepID], spansIn[dropID])
	}
	t.Logf("%d of 24 traces kept", kept)
}
