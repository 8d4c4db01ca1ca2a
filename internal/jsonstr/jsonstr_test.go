package jsonstr

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendIsJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "quote \" back \\ nl \n tab \t", "\x01\x7f", "é€😀", "bad \xff utf8", "\u2028"} {
		b := Append(nil, s, false)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %s is no JSON string: %v", s, b, err)
		}
		if utf8.ValidString(s) && got != s {
			t.Errorf("%q came back as %q", s, got)
		}
		if Len(s) != len(b)-2 {
			t.Errorf("%q: Len %d, Append wrote %d", s, Len(s), len(b)-2)
		}
	}
}

func TestCutFits(t *testing.T) {
	s := "a\"é\x01😀\xffz"
	for n := 0; n <= Len(s)+1; n++ {
		c := Cut(s, n)
		if Len(c) > n || !utf8.ValidString(string([]rune(c))) || len(c) > len(s) || s[:len(c)] != c {
			t.Errorf("Cut(%d) = %q (Len %d)", n, c, Len(c))
		}
		if n >= Len(s) && c != s {
			t.Errorf("Cut(%d) = %q, want all of it", n, c)
		}
	}
}

func FuzzCut(f *testing.F) {
	f.Add("a\"é\x01😀\xffz", 5)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = max(n, 0)
		c := Cut(s, n)
		if Len(c) > n || s[:len(c)] != c {
			t.Fatalf("Cut(%q, %d) = %q", s, n, c)
		}
		var back string
		if err := json.Unmarshal(Append(nil, c, false), &back); err != nil {
			t.Fatal(err)
		}
	})
}
