//go:build unix

package debugsrv

import (
	"runtime"
	"syscall"
)

// processVars is the process's CPU time (user and system, all threads) and
// peak resident set.
func processVars() any {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return nil
	}
	rss := int64(ru.Maxrss) * 1024 // Linux and the BSDs: KiB
	if runtime.GOOS == "darwin" {
		rss = int64(ru.Maxrss) // bytes
	}
	return map[string]any{
		"cpu_seconds":   float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9,
		"max_rss_bytes": rss,
	}
}
