package workload

import (
	"math"
	"strings"
	"testing"
)

func TestParseAdapterMix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Share
		err  string
	}{
		{"", nil, ""},
		{"sql-lora=0.3, chat-lora=0.2", []Share{{"sql-lora", 0.3}, {"chat-lora", 0.2}}, ""},
		{"org/adapter_v1.2=1", []Share{{"org/adapter_v1.2", 1}}, ""},
		{"a=0.5,b=0.6", nil, "sum to"},
		{"a=0.5,a=0.1", nil, "twice"},
		{"a", nil, "name=fraction"},
		{"=0.1", nil, "1 to 64"},
		{"a b=0.1", nil, "has ' '"},
		{"a=0", nil, "(0, 1]"},
		{"a=NaN", nil, "(0, 1]"},
		{"a=-0.1", nil, "(0, 1]"},
		{strings.Repeat("x", 65) + "=0.1", nil, "1 to 64"},
	} {
		got, err := ParseAdapterMix(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: share %d = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
	var many []string
	for i := range MaxAdapters + 1 {
		many = append(many, "a"+string(rune('a'+i))+"=0.01")
	}
	if _, err := ParseAdapterMix(strings.Join(many, ",")); err == nil {
		t.Errorf("%d adapters accepted", MaxAdapters+1)
	}
}

func TestParseAcceptance(t *testing.T) {
	got, err := ParseAcceptance("0.8, 0.7,0.6")
	if err != nil || len(got) != 3 || got[1] != 0.7 {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "1.5", "x", "0.5,,0.4", "-0.1", "NaN"} {
		if _, err := ParseAcceptance(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The assignments follow the mix and the rate, are the same for the same
// seed, and differ for another.
func TestAssignAdaptersAndImages(t *testing.T) {
	w := Synthetic(20000, 5, 1)
	w.AssignAdapters([]Share{{"a", 0.3}, {"b", 0.2}}, 9)
	n := map[string]int{}
	for _, r := range w.Requests {
		n[r.Adapter]++
	}
	for name, want := range map[string]float64{"a": 0.3, "b": 0.2, "": 0.5} {
		if got := float64(n[name]) / 20000; math.Abs(got-want) > 0.02 {
			t.Errorf("adapter %q serves %.3f of requests, want %.2f", name, got, want)
		}
	}
	if err := w.AssignImages(0.25, 3, 9); err != nil {
		t.Fatal(err)
	}
	var mm, last int
	perCount := map[int]int{}
	for _, r := range w.Requests {
		if r.Images > 0 {
			mm++
			perCount[r.Images]++
			if r.ImagesLast {
				last++
			}
		}
	}
	if got := float64(mm) / 20000; math.Abs(got-0.25) > 0.02 || len(perCount) != 3 || math.Abs(float64(last)/float64(mm)-0.5) > 0.05 {
		t.Errorf("%d multimodal (%.3f), images per request %v, %d at the end", mm, got, perCount, last)
	}
	again := Synthetic(20000, 5, 1)
	again.AssignAdapters([]Share{{"a", 0.3}, {"b", 0.2}}, 9)
	_ = again.AssignImages(0.25, 3, 9)
	other := Synthetic(20000, 5, 1)
	_ = other.AssignImages(0.25, 3, 10)
	same, diff := true, false
	for i := range w.Requests {
		same = same && w.Requests[i] == again.Requests[i]
		diff = diff || w.Requests[i].Images != other.Requests[i].Images
	}
	if !same || !diff {
		t.Errorf("same seed gives the same workload: %v; another seed differs: %v", same, diff)
	}
	for _, bad := range []struct {
		rate float64
		max  int
	}{{-0.1, 1}, {1.1, 1}, {math.NaN(), 1}, {0.5, 0}, {0.5, MaxImages + 1}} {
		if err := w.AssignImages(bad.rate, bad.max, 1); err == nil {
			t.Errorf("rate %v, %d images accepted", bad.rate, bad.max)
		}
	}
}

// FuzzParseAdapterMix: any string parses to a valid mix or a clear error,
// never a panic.
func FuzzParseAdapterMix(f *testing.F) {
	for _, s := range []string{"", "a=0.3,b=0.2", "a=1,", "=", "a=1e-300", "a=0.5,b=0.5000000001", "ä=0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mix, err := ParseAdapterMix(s)
		if err != nil {
			return
		}
		sum := 0.0
		seen := map[string]bool{}
		for _, m := range mix {
			if checkAdapterName(m.Adapter) != nil || seen[m.Adapter] || !(m.Fraction > 0 && m.Fraction <= 1) {
				t.Fatalf("%q parsed to an invalid share %+v", s, m)
			}
			seen[m.Adapter] = true
			sum += m.Fraction
		}
		if sum > 1+1e-9 || len(mix) > MaxAdapters {
			t.Fatalf("%q parsed to %v", s, mix)
		}
	})
}

// FuzzParseAcceptance: any string parses to probabilities or an error.
func FuzzParseAcceptance(f *testing.F) {
	for _, s := range []string{"0.8,0.7", "1", "0", "0.5,", "nan", "1e-400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseAcceptance(s)
		if err != nil {
			return
		}
		if len(ps) == 0 || len(ps) > 64 {
			t.Fatalf("%q parsed to %d probabilities", s, len(ps))
		}
		for _, p := range ps {
			if !(p >= 0 && p <= 1) {
				t.Fatalf("%q parsed to %v", s, ps)
			}
		}
	})
}
