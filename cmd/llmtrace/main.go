// Command llmtrace is llmtrace's toolbox: replay an update log into traces,
// metrics and RequestStats; run a tracing proxy in front of an
// OpenAI-compatible server; collect updates from engines in other processes;
// measure span export throughput under load.
//
// Every subcommand reads the standard OTEL_* environment variables for
// export (see otelconf); without them nothing is exported. A usage error
// (a bad flag or argument) exits with status 2 after one line saying what
// is wrong.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the exit status.
type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// untilSignal adapts a long-running subcommand: its context ends on SIGINT
// or SIGTERM, so it can drain and flush before exiting; a second signal
// exits at once (signalContext).
func untilSignal(run func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int) func([]string, io.Reader, io.Writer, io.Writer) int {
	return func(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
		ctx, stop := signalContext(stderr)
		defer stop()
		return run(ctx, args, stdin, stdout, stderr)
	}
}

// exitUsage is the exit status of every usage error (a bad flag, a missing
// or unexpected argument), as the flag package's own.
const exitUsage = 2

// parseFlags parses a subcommand's arguments. When it returns false the
// subcommand ends with code: 0 for -h (after the full usage), bad
// otherwise, after one line that says what is wrong (usageError).
func parseFlags(fs *flag.FlagSet, args []string, bad int) (code int, ok bool) {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints the error and then the whole usage, which
	// buries the error under it; print the error alone instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err == nil {
		return 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return 0, false
	}
	usageError(fs, "%v", err)
	return bad, false
}

// usageError says what is wrong with a subcommand's arguments, and where
// the usage is, on the flag set's output; it returns exitUsage.
func usageError(fs *flag.FlagSet, format string, a ...any) int {
	w := fs.Output()
	fmt.Fprintf(w, "llmtrace %s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fmt.Fprintf(w, "Run 'llmtrace %s -h' for usage.\n", fs.Name())
	return exitUsage
}

// commands is filled by each subcommand's file in an init function.
var commands = map[string]command{}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprintln(stderr, "llmtrace: no command given")
			usage(stderr)
			return exitUsage
		}
		usage(stderr)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "llmtrace: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: llmtrace <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
