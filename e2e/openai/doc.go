// Package openai holds the tests that drive llmtrace's OpenAI-compatible
// HTTP middleware, and the `llmtrace proxy` binary in front of an untraced
// server, with the official OpenAI Go SDK. It is a module of its own so
// the SDK stays out of llmtrace's go.mod.
package openai
