// Package spans turns one request's timeline into its OpenTelemetry span tree
// (SPEC §3): a SERVER root named "{operation} {model}" and INTERNAL children
// for input processing, each queue wait, each prefill run, each decode
// segment and detokenization, all with explicit timestamps.
//
// Build is pure: it computes the tree as plain data, so the same tree can be
// emitted through a trace.Tracer (Emit), drawn on a terminal or checked in a
// test. Build guarantees that every child lies inside the root and that no
// span has a negative duration; when clock skew between the frontend and the
// engine process would break that, it clamps the span and counts the clamp in
// Tree.Clamped.
package spans
