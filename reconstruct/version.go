package reconstruct

// ScopeName is the instrumentation scope of the spans this package rebuilds
// and of its counter.
const ScopeName = "github.com/llmtrace/llmtrace/reconstruct"

// Version is the version of this package.
func Version() string { return "0.1.0" }
