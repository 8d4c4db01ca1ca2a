package main

import (
	"strings"
	"testing"
)

func TestParseRoute(t *testing.T) {
	for _, c := range []struct {
		in   string
		want route
		err  string
	}{
		{in: "/chat/completions=chat", want: route{"/chat/completions", "chat"}},
		{in: "/openai/v1/completions/=text_completion", want: route{"/openai/v1/completions", "text_completion"}},
		{in: "/v1/embeddings=", want: route{"/v1/embeddings", ""}},
		{in: "/=chat", want: route{"/", "chat"}},
		{in: "/chat/completions", err: "want PATH=OPERATION"},
		{in: "chat/completions=chat", err: "must begin with /"},
		{in: "/a?x=1=chat", err: "no query"},
		{in: "/a b=chat", err: "no query"},
		{in: "/" + strings.Repeat("a", maxRoutePath) + "=chat", err: "at most 256 bytes"},
		{in: "/generate=generate", err: "one of chat, text_completion, embeddings"},
		{in: "/a=Chat", err: "one of chat"},
	} {
		got, err := parseRoute(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one saying %q", c.in, err, c.err)
		case c.err == "" && got != c.want:
			t.Errorf("%q: %+v, want %+v", c.in, got, c.want)
		}
	}
}

func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{"/chat/completions=chat", "/v1/embeddings=", "x", "/a?b=chat", "/=embeddings"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseRoute(s)
		if err != nil {
			return
		}
		// The path as given, or with its one trailing slash dropped, as
		// the proxy drops a request's.
		path, op, _ := strings.Cut(s, "=")
		if !strings.HasPrefix(r.path, "/") || len(r.path) > maxRoutePath || r.path != path && r.path+"/" != path || r.operation != op {
			t.Errorf("%q: %+v", s, r)
		}
		if r.operation != "" && r.operation != "chat" && r.operation != "text_completion" && r.operation != "embeddings" {
			t.Errorf("%q: operation %q", s, r.operation)
		}
	})
}
