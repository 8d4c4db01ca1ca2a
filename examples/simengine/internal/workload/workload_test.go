package workload

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadAzureFormat(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\r\n" +
		"2023-11-16 18:15:50.9951690,396,109\r\n" +
		"2023-11-16 18:15:46.6805900,374,44\r\n" +
		"\r\n" +
		"2023-11-16 18:15:51,91,0\r\n"
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d requests, want 3", len(got))
	}
	want0 := time.Date(2023, 11, 16, 18, 15, 46, 680590000, time.UTC)
	if !got[0].Arrival.Equal(want0) || got[0].PromptTokens != 374 || got[0].OutputTokens != 44 {
		t.Errorf("first request (sorted) = %+v, want arrival %v, 374/44", got[0], want0)
	}
	if got[1].Arrival.Nanosecond() != 995169000 {
		t.Errorf("100 ns resolution lost: %v", got[1].Arrival)
	}
	if got[2].OutputTokens != 0 || got[2].Arrival.Nanosecond() != 0 {
		t.Errorf("third = %+v", got[2])
	}
}

func TestReadColumnsInAnyOrder(t *testing.T) {
	in := "GeneratedTokens,extra,TIMESTAMP,ContextTokens\n7,x,2024-01-01 00:00:01.5,12\n"
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PromptTokens != 12 || got[0].OutputTokens != 7 || got[0].Arrival.Nanosecond() != 5e8 {
		t.Fatalf("got %+v", got)
	}
}

func TestReadErrorsNameTheLine(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"no header":     {"2023-11-16 18:15:46.68,1,2\n", "line 1: header"},
		"bad timestamp": {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16,1,2\n", "line 2: TIMESTAMP"},
		"negative":      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\n2023-11-16 18:15:47,-1,2\n", "line 3: ContextTokens"},
		"short row":     {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1\n", "line 2: 2 fields"},
		"absurd":        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,99999999999\n", "line 2: GeneratedTokens"},
		"empty":         {"", "no header"},
	} {
		_, err := Read(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", name, err, tc.want)
		}
	}
}

func TestScaleRateAndHead(t *testing.T) {
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &Workload{Requests: []Request{{Arrival: t0}, {Arrival: t0.Add(time.Second)}, {Arrival: t0.Add(3 * time.Second)}}}
	if err := w.ScaleRate(2); err != nil {
		t.Fatal(err)
	}
	if !w.Requests[0].Arrival.Equal(t0) || w.Requests[2].Arrival.Sub(t0) != 1500*time.Millisecond {
		t.Errorf("scaled arrivals: %v", w.Requests)
	}
	if w.Span() != 1500*time.Millisecond {
		t.Errorf("span %v", w.Span())
	}
	if err := w.ScaleRate(0); err == nil {
		t.Error("rate scale 0 accepted")
	}
	w.Head(2)
	if len(w.Requests) != 2 {
		t.Errorf("head: %d", len(w.Requests))
	}
	w.Head(0)
	if len(w.Requests) != 2 {
		t.Errorf("head(0) changed the workload")
	}
	w.Shift(t0.Add(time.Hour))
	if !w.Requests[0].Arrival.Equal(t0.Add(time.Hour)) || w.Requests[1].Arrival.Sub(w.Requests[0].Arrival) != 500*time.Millisecond {
		t.Errorf("shift: %v", w.Requests)
	}
}

func TestSyntheticIsDeterministicAndPoisson(t *testing.T) {
	a, b := Synthetic(5000, 4, 7), Synthetic(5000, 4, 7)
	for i := range a.Requests {
		if a.Requests[i] != b.Requests[i] {
			t.Fatalf("request %d differs between runs with one seed", i)
		}
	}
	rate := float64(len(a.Requests)-1) / a.Span().Seconds()
	if rate < 3.7 || rate > 4.3 {
		t.Errorf("mean rate %.2f/s, want about 4", rate)
	}
	for i, r := range a.Requests {
		if r.PromptTokens < 16 || r.PromptTokens > 7000 || r.OutputTokens < 1 || r.OutputTokens > 1000 {
			t.Fatalf("request %d out of bounds: %+v", i, r)
		}
		if i > 0 && r.Arrival.Before(a.Requests[i-1].Arrival) {
			t.Fatalf("arrivals out of order at %d", i)
		}
	}
	if c := Synthetic(10, 4, 8); c.Requests[1] == a.Requests[1] {
		t.Error("different seeds gave the same workload")
	}
}

// The shared traces are read whole when present (they are not part of the
// repository; see ../shared/workloads/README.md).
func TestLoadSharedTraces(t *testing.T) {
	p := FindDefault()
	if p == "" {
		t.Skip("../shared/workloads not present")
	}
	w, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 19366 {
		t.Errorf("%s: %d requests, want 19366", p, len(w.Requests))
	}
	if w.Span() < 50*time.Minute || w.Span() > 70*time.Minute {
		t.Errorf("%s spans %v, want about an hour", p, w.Span())
	}
	code := strings.Replace(p, "conv", "code", 1)
	if _, err := os.Stat(code); err == nil {
		c, err := Load(code)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Requests) != 8819 {
			t.Errorf("%s: %d requests, want 8819", code, len(c.Requests))
		}
	}
}
