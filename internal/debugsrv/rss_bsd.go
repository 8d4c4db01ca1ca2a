//go:build unix && !linux

package debugsrv

import (
	"runtime"
	"syscall"
)

// peakRSS is getrusage's peak resident set: KiB on the BSDs, bytes on
// Darwin.
func peakRSS(ru *syscall.Rusage) int64 {
	if runtime.GOOS == "darwin" {
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) * 1024
}
