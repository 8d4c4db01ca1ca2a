// Package otelhttpmw is net/http middleware that turns each request to an
// OpenAI-compatible inference endpoint into a request of an
// otelstats.Tracker: one trace (SPEC §3) and the serving metrics (SPEC §4),
// as the client saw it.
//
//	tracker, _ := otelstats.NewTracker(otelstats.WithAutoSweep(time.Second))
//	http.ListenAndServe(addr, otelhttpmw.NewHandler(mux, tracker))
//
// It lives in its own package, beside otelstats rather than in it, for the
// same reasons otelhttp is apart from the SDK: it has its own Option type
// without clashing with the Tracker's, it keeps net/http out of the core,
// and it uses nothing but the core's public API — which is what any other
// frontend integration can use too.
//
// # What is traced
//
// POST requests to DefaultRoutes (/v1/chat/completions → "chat",
// /v1/completions → "text_completion", /v1/responses → "chat"; WithRoute adds
// or removes paths). Everything else — /health, /healthz, /ready, /metrics,
// unknown paths, other methods — is passed to the handler untouched: the
// same *http.Request and http.ResponseWriter.
//
// # The request body
//
// The middleware reads up to the peek limit (1 MiB, WithPeekLimit) of the
// body ahead and hands the handler a body that yields exactly the bytes of
// the original, in order, then the rest of it, then the original's error or
// EOF. From the JSON it reads model, stream, stream_options.include_usage
// and the sampling parameters (temperature, top_p, top_k, max_tokens /
// max_completion_tokens / max_output_tokens, seed, n, frequency_penalty,
// presence_penalty, stop). A field of an unexpected type is skipped; a body
// that is not JSON, is malformed, or is longer than the limit is scanned
// field by field as far as it makes sense. Without a model the request is not
// traced; the handler never notices either way.
//
// # The response
//
// The handler's ResponseWriter is wrapped: every byte goes through first and
// unchanged; the middleware reads a copy afterwards. http.Flusher is always
// implemented (through http.ResponseController, a no-op when the writer
// underneath cannot flush) and Unwrap gives http.ResponseController the
// writer underneath (deadlines, Hijack, full duplex).
//
//   - A text/event-stream response is read event by event. Each event whose
//     JSON has content — delta.content, reasoning, refusal, tool calls,
//     choices[].text, a Responses API *.delta event — is one DETOKENIZED
//     delivery, timed at the Write that completed it. A role-only first
//     chunk, keep-alive comments and the usage-only last chunk are not. The
//     first token is the first delivery, so TTFT ends at the first chunk
//     with content.
//   - A JSON response is read at the end (up to the peek limit): one
//     delivery of usage.completion_tokens tokens timed at its first byte.
//   - finish_reason comes from the choices (a Responses API status:
//     completed → stop, incomplete → length or its reason); usage from the
//     last chunk or the response (prompt_tokens / input_tokens,
//     completion_tokens / output_tokens).
//
// Each delivery counts one token, and the last one whatever more the usage
// says the stream had, so the request's output tokens equal
// usage.completion_tokens whenever a usage came (never fewer than the
// content chunks).
//
// # Input processing and the prompt's size
//
// INPUT_PROCESSED carries the prompt's size and the sampling parameters,
// and must precede the output. The middleware records it:
//
//   - when the handler reports its tokenization with InputProcessed (exact
//     time and count: do this in servers that tokenize);
//   - else, when the prompt's size is known from a usage before any output
//     has to be recorded — a non-stream response, or a stream that asked
//     for stream_options.include_usage (the Responses API always reports
//     usage), for which the deliveries wait, timestamped, for the final
//     usage (at most 4,096 of them) — timed when the body was parsed;
//   - else not at all: the prompt's size, if a usage brings it at the end,
//     goes on FINISHED, and the sampling parameters are not recorded (the
//     tracker takes them only with INPUT_PROCESSED).
//
// Never a made-up prompt size: absent is absent.
//
// A server whose engine records the engine side of its requests in the same
// Tracker (under otelstats.RequestFromContext's id) should report
// InputProcessed: otherwise, while deliveries wait for the final usage, the
// tracker has seen nothing from the frontend but ARRIVED when the engine's
// FINISHED comes, ends the request there, and the frontend's deliveries
// arrive too late for it. usage's
// prompt_tokens_details.cached_tokens is read but cannot be recorded: the
// tracker takes cached tokens only from the engine's PREFILLING.
//
// # How a request ends
//
//   - The client goes away before the response is complete (the request's
//     context is cancelled while the handler runs, or a Write fails): abort,
//     at the moment it went. Deliveries written after that are not counted.
//     "Complete" means [DONE] or a finish reason was seen (SSE), or the
//     response was written before the client left (JSON).
//   - The handler answers with status ≥ 400: error, error.type the status
//     code ("500", "429", …). An error event in a stream: error,
//     error.type "stream_error" (a failed Responses API response:
//     "response_failed").
//   - The handler panics: error, error.type "panic" (abort when the client
//     was already gone, as with http.ErrAbortHandler); the panic goes on.
//   - Otherwise the finish reason read from the response, "stop" if none.
//
// # Incoming trace context
//
// The incoming traceparent (WithPropagators; W3C Trace Context by default)
// makes the root span a child of the caller's span: same trace id, the
// caller's span as parent. Per SPEC §6 its sampled flag decides sampling
// only when trusted: WithTrustIncomingSampling(Func) says which callers are,
// and the middleware tells the tracker per request (Arrival.TrustParent), so
// the Tracker itself need not trust every parent. A trusted caller may also
// ask for a detail level with the X-Llmtrace-Detail header (0–3).
//
//   - Trusted request: the span context is passed on as sent, flag
//     included. The tracker keeps the trace if the flag is set and drops it
//     if not (reason "parent").
//   - Untrusted request (the default): the trace and parent span ids are
//     kept, so our spans still join the caller's trace, and the sampled
//     flag is set whatever the caller sent. With the default Tracker, which
//     trusts no parent, its own end-of-request policy decides and the flag
//     is never looked at; it then emits the root with the flag set, so an
//     sdktrace.ParentBased sampler records what it kept. A caller can
//     never switch our tracing off.
//   - Public request (WithPublicEndpointFunc; trusted ones excepted): the
//     incoming context is ignored, the root span starts a new trace, and a
//     caller cannot even choose the trace its spans land in.
//
// Leave the Tracker's own otelstats.WithTrustParentSampling off with this
// middleware: it would trust every caller's flag, and untrusted callers'
// flags are forced on here.
//
// # The handler's context
//
// The handler's request context carries the root span context (spans the
// handler starts are children of the request's root) and the
// otelstats.Request (otelstats.RequestFromContext), whose ID an in-process
// engine uses for its Steps.
package otelhttpmw
