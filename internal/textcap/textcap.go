// Package textcap bounds strings that come from outside before they
// become attributes: OTLP strings must be UTF-8 (one invalid value fails
// the SDK exporter's whole batch, other users' spans with it), and a value
// must not make a span too large to export.
package textcap

import (
	"strings"
	"unicode/utf8"
)

// Clean is s with each run of invalid UTF-8 bytes replaced by U+FFFD, cut
// to at most n bytes on a rune boundary; changed says it differs from s.
// A valid string within n is returned as is, without allocating.
func Clean(s string, n int) (clean string, changed bool) {
	if !utf8.ValidString(s) {
		s, changed = strings.ToValidUTF8(s, "\uFFFD"), true
	}
	if len(s) > n {
		s, changed = Cut(s, n), true
	}
	return s, changed
}

// Cut is s cut to at most n bytes, not inside a UTF-8 sequence.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
