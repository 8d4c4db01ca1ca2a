// Package jsonstr writes JSON strings by hand for the encoders that build
// their JSON without encoding/json (update logs, captured messages), and
// measures them, so a caller can cut a string to fit a byte budget.
package jsonstr

import "unicode/utf8"

// Append appends s to dst as a JSON string. strconv.AppendQuote's Go
// escapes (\x01, \a, \U000e0001) are no JSON. Invalid UTF-8 becomes U+FFFD,
// as encoding/json reads it, unless rawInvalid: then the bytes are written
// as they are (for an id, where a U+FFFD could make it another's id and a
// reader had better refuse the line).
func Append(dst []byte, s string, rawInvalid bool) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 && !rawInvalid {
				dst = append(dst, "\ufffd"...)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c < 0x20 || c == 0x7f:
			dst = append(dst, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return append(dst, '"')
}

const hexDigit = "0123456789abcdef"

// Len is the length of Append(nil, s, false) without its two quotes.
func Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		size := runeLen(s[i:])
		n += size.out
		i += size.in
	}
	return n
}

// Cut returns the longest head of s, cut on a rune boundary, whose
// escaped length (Len) is at most n.
func Cut(s string, n int) string {
	used := 0
	for i := 0; i < len(s); {
		size := runeLen(s[i:])
		if used+size.out > n {
			return s[:i]
		}
		used += size.out
		i += size.in
	}
	return s
}

type sizes struct{ in, out int }

// runeLen is how many bytes of s its first rune takes, and how many it
// takes escaped.
func runeLen(s string) sizes {
	c := s[0]
	if c >= utf8.RuneSelf {
		r, size := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && size == 1 {
			return sizes{1, len("\ufffd")}
		}
		return sizes{size, size}
	}
	switch {
	case c == '"' || c == '\\' || c == '\n':
		return sizes{1, 2}
	case c < 0x20 || c == 0x7f:
		return sizes{1, 6}
	}
	return sizes{1, 1}
}
