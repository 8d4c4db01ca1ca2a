// Package cli tests llmtrace's shipped commands as users run them: the
// `llmtrace` binary, built once, run with each subcommand and every flag its
// -h shows (exit status, output, no panic); every shell command of the
// README's code blocks, extracted from the README and run with the servers
// it needs (Jaeger from e2e/testbackend, the example server); and the
// collector attacked as a hostile peer would (a 20,000-connection flood,
// strangers without the token, a producer whose clock runs far ahead).
//
// The flag table (flags_test.go) is checked against each subcommand's -h:
// a flag that no case uses fails TestEveryFlagHasACase, so whoever adds a
// flag adds its case.
package cli
