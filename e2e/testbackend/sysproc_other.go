//go:build !linux

package testbackend

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
