//go:build !unix

package otelstats_test

// benchCPUTime is not measured on this platform.
func benchCPUTime() int64 { return -1 }
