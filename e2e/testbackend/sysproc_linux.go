package testbackend

import "syscall"

// sysProcAttr asks the kernel to kill the backend when the test binary dies
// (e.g. on a `go test -timeout` panic), so no stray Jaeger keeps its ports.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
