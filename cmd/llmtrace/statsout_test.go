package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -stats-out and -spans-out naming one file would each truncate it and
// overwrite the other's lines; both commands refuse it as a usage error.
func TestStatsAndSpansOutOneFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "out.jsonl")
	link := filepath.Join(dir, "link.jsonl")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, stats, spans string
		refused            bool
	}{
		{"same name", f, f, true},
		{"another spelling", f, filepath.Join(dir, ".", "out.jsonl"), true},
		{"a link to it", f, link, true},
		{"not yet there", filepath.Join(dir, "new.jsonl"), filepath.Join(dir, "new.jsonl"), true},
		{"two files", f, filepath.Join(dir, "spans.jsonl"), false},
		{"both stdout", "-", "-", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a command that starts stops at once
			codes := map[string]int{
				"collect": collect(ctx, []string{"-listen", "-", "-stats-out", tc.stats, "-spans-out", tc.spans}, strings.NewReader(""), &bytes.Buffer{}, &stderr),
				"proxy":   runProxy(ctx, []string{"-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-stats-out", tc.stats, "-spans-out", tc.spans}, &bytes.Buffer{}, &stderr, nil),
			}
			for cmd, code := range codes {
				if refused := code == exitUsage; refused != tc.refused {
					t.Errorf("%s: exit %d, refused %v, want %v\n%s", cmd, code, refused, tc.refused, stderr.String())
				}
			}
			if tc.refused && !strings.Contains(stderr.String(), "name one file") {
				t.Errorf("no reason given:\n%s", stderr.String())
			}
		})
	}
}
