package textcap

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	for _, c := range []struct {
		in      string
		n       int
		want    string
		changed bool
	}{
		{"agent", 16, "agent", false},
		{"ag\xff\xfeent", 16, "ag\uFFFDent", true},
		{"héllo", 2, "h", true}, // not inside é
		{"héllo", 3, "hé", true},
		{strings.Repeat("x", 10), 10, strings.Repeat("x", 10), false},
		{"\xff", 0, "", true},
	} {
		got, changed := Clean(c.in, c.n)
		if got != c.want || changed != c.changed {
			t.Errorf("Clean(%q, %d) = %q, %v; want %q, %v", c.in, c.n, got, changed, c.want, c.changed)
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "agent", "ag\xff\xfeent", "héllo", "\xe2\x82"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 {
			n = -n
		}
		got, changed := Clean(s, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("Clean(%q, %d) = %q", s, n, got)
		}
		if !changed && got != s {
			t.Fatalf("unchanged but differs: %q %q", s, got)
		}
	})
}
