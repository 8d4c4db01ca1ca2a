// Package openai holds the tests that drive llmtrace's OpenAI-protocol
// layer (package openaihttp) with real clients: the middleware around the
// example server, and the built `llmtrace proxy` binary in front of an
// untraced one, with the official OpenAI Go SDK and, when node and npm are
// installed, the official Node openai package (installed once into
// ~/.cache/llmtrace). binary_test.go runs every flag of `llmtrace proxy`
// through the binary and measures its peak RSS under 40 concurrent 15 MB
// bodies. It is part of the e2e module so the SDK stays out of llmtrace's
// go.mod.
package openai
