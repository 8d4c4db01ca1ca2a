// Package openai holds the tests that drive llmtrace's OpenAI-compatible
// HTTP middleware with the official OpenAI Go SDK. It is a module of its
// own so the SDK stays out of llmtrace's go.mod.
package openai
