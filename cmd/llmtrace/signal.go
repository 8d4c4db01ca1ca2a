package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// sameSignal is how soon after the first signal another one is taken as
// the same request, delivered twice.
const sameSignal = 200 * time.Millisecond

// signalContext returns a context that ends at the first SIGINT or SIGTERM,
// so that a command drains and flushes before it exits. A second signal
// ends the process at once, whatever the command is waiting for, with the
// shell's status for a signal (130 for SIGINT, 143 for SIGTERM). A
// signal within sameSignal of the first is the first delivered again, not
// a second: timeout(1) and some supervisors send one to the command and
// then to its process group, which would otherwise skip the drain and the
// flush every time. stop releases the signals.
func signalContext(stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var first time.Time
		select {
		case s := <-sigs:
			first = time.Now()
			cancel()
			fmt.Fprintf(stderr, "llmtrace: %v: finishing; signal again to exit at once\n", s)
		case <-done:
			return
		}
		for {
			select {
			case s := <-sigs:
				if time.Since(first) < sameSignal {
					// The same request delivered twice: timeout(1)
					// signals the command and then its process group.
					continue
				}
				fmt.Fprintf(stderr, "llmtrace: %v again: exiting now\n", s)
				os.Exit(signalStatus(s))
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// keepServingOnBrokenPipe makes a write to a closed pipe an error rather
// than the end of the process: Go's runtime kills a program whose stdout or
// stderr write meets a reader that went away (SIGPIPE), which for a server
// — `llmtrace proxy -stats-out - | head`, a log shipper restarting — would
// cut every stream in flight and skip the drain and the exit report. The
// lines are lost instead, and the sink says so at exit.
func keepServingOnBrokenPipe() { signal.Ignore(syscall.SIGPIPE) }
