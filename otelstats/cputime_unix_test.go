//go:build unix

package otelstats_test

import "syscall"

// benchCPUTime is the CPU time the process has used so far (user plus
// system, every thread), in nanoseconds, or -1.
func benchCPUTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
