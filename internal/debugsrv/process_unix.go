//go:build unix

package debugsrv

import "syscall"

// processVars is the process's CPU time (user and system, all threads) and
// peak resident set.
func processVars() any {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return nil
	}
	return map[string]any{
		"cpu_seconds":   float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9,
		"max_rss_bytes": peakRSS(&ru),
	}
}
