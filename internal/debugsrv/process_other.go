//go:build !unix

package debugsrv

// processVars has nothing to say where getrusage is missing.
func processVars() any { return nil }
