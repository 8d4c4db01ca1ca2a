package debugsrv

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// peakRSS is the process's VmHWM: the peak resident set of its own memory
// since it was executed. Not getrusage's ru_maxrss, which Linux carries
// across fork and exec: a process started by a larger one (a test binary,
// a supervisor) would report its parent's peak.
func peakRSS(ru *syscall.Rusage) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ru.Maxrss * 1024
	}
	for line := range bytes.Lines(b) {
		v, ok := bytes.CutPrefix(line, []byte("VmHWM:"))
		if !ok {
			continue
		}
		kib, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
		if err != nil {
			break
		}
		return kib * 1024
	}
	return ru.Maxrss * 1024
}
