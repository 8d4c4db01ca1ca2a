// Package unixsec writes times as exact decimal Unix seconds
// ("1700000000.301"), the form the update log, the wire protocol and
// RequestStats share: no float64 rounding, no trailing zeros.
package unixsec

import (
	"strconv"
	"time"
)

// Append appends t as decimal Unix seconds with up to nine fraction digits.
func Append(dst []byte, t time.Time) []byte {
	ns := t.UnixNano()
	dst = strconv.AppendInt(dst, ns/1e9, 10)
	frac := ns % 1e9
	if frac == 0 {
		return dst
	}
	var b [10]byte
	b[0] = '.'
	for i := 9; i >= 1; i-- {
		b[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := 10
	for b[n-1] == '0' {
		n--
	}
	return append(dst, b[:n]...)
}
