// Package openaihttp traces the OpenAI HTTP protocol — chat completions,
// completions, the Responses API and embeddings, streamed or not — into an
// otelstats.Tracker: one trace per request (SPEC §3) and the serving
// metrics (SPEC §4), as the client saw them. It has two faces over one
// observation core:
//
//   - NewHandler (or NewMiddleware) wraps the http.Handler of an
//     OpenAI-compatible server written in Go;
//   - NewProxy is a reverse proxy to any OpenAI-compatible server (vLLM,
//     SGLang, TGI, llama.cpp, Ollama), an http.Handler to mount in a mux of
//     your own; `llmtrace proxy` is this handler in a server.
//
// In a server:
//
//	tracker, _ := otelstats.NewTracker(otelstats.WithAutoSweep(time.Second))
//	http.ListenAndServe(":8000", openaihttp.NewHandler(mux, tracker))
//
// In front of one:
//
//	up, _ := url.Parse("http://127.0.0.1:8000")
//	proxy, _ := openaihttp.NewProxy(up, tracker)
//	mux.Handle("/v1/", proxy)
//
// Both read the request's body and every byte of the response as it goes
// by, never changing, delaying or reordering one, and both apply the same
// rules: the same SSE reader, chunk parser, route table, finish rules and
// request ids. The tracker should be live (otelstats.WithAutoSweep): the
// layer records real time.
//
// # What is traced
//
// POST requests to DefaultRoutes: /v1/chat/completions → "chat",
// /v1/completions → "text_completion", /v1/responses → "chat",
// /v1/embeddings → "embeddings"; WithRoute adds or removes paths (a trailing
// slash is ignored; the proxy also matches the path it sends upstream).
// Everything else — /health, /metrics, /v1/models, other methods — passes
// untouched: the middleware hands the handler the same *http.Request and
// http.ResponseWriter; the proxy forwards it with the caller's headers.
//
// # The request body
//
// The layer reads the top-level fields of the body's JSON object as bytes
// go by, keeping only them: model, stream, stream_options.include_usage and
// the sampling parameters (temperature, top_p, top_k, max_tokens /
// max_completion_tokens / max_output_tokens, seed, n, frequency_penalty,
// presence_penalty, stop). A field of an unexpected type is skipped; a key
// matches without regard to case; a later duplicate wins. Nested values
// (the messages) are skipped without being held, so a body of any size
// costs a few kilobytes.
//
//   - The middleware reads up to WithPeekLimit (64 KiB) of the body before
//     it calls the handler, on towards the end of the object (at most
//     WithMaxBody, 16 MiB, within the budget) when the model was not among
//     those bytes — the OpenAI SDKs write it after the messages. The
//     handler reads exactly the original bytes, then the original's error
//     or EOF; what was read ahead is given back to the budget as the handler
//     consumes it.
//   - The proxy holds none of it: it reads the fields while the body
//     streams upstream, and records the request's ARRIVED (at its arrival
//     time) when the upstream answers. An upstream that fails before it
//     read the body leaves the rest to the proxy, which reads on (up to
//     MaxBody) to learn the model.
//
// A body that names no model the layer can read is still traced, under
// UnknownModel, with llm.http.request_body saying why (not_json, no_model,
// model_too_long, unread) and error.type from the response (usually "400").
//
// # The response
//
//   - A text/event-stream response is read event by event; lines end at
//     CRLF, LF or CR. Each event whose JSON has content — delta.content,
//     reasoning, refusal, tool calls, audio (a transcript or data, not its
//     id alone), choices[].text, a Responses API delta of text, refusal,
//     reasoning or the input the model writes for a tool (function, custom,
//     MCP, code interpreter, shell command) — is a DETOKENIZED delivery
//     timed when it was written to the client; its tokens are its choices
//     with content. A role-only
//     first chunk, keep-alive comments and the usage-only last chunk are
//     not deliveries, so TTFT ends at the first chunk with content.
//     Writes are read in batches, each event still at its own write's
//     time: a write is set aside (4 KiB and 32 writes a stream, from the
//     first half of WithBodyBudget) and the batch read when the next would
//     not fit or comes 100 ms after the batch's first, and at the end.
//     Reading each as it went by cost several times as much, with caches
//     cold between chunks, and held the next chunk back that long; the
//     tracker sees the same deliveries, up to 100 ms late (a stream that
//     pauses: when it goes on or ends). Nothing after [DONE] is read:
//     the OpenAI SDKs stop there, so content or an error a broken upstream
//     sends after it is neither output nor a failure.
//   - A JSON response is scanned like the request: its id, model, choices
//     (up to WithEventLimit; of longer ones, such as a long completion's
//     logprobs, only the finish reasons, read as they go by), usage,
//     status and error. It was received in one piece, so it has no token
//     times (SPEC §2): FINISHED carries its usage.completion_tokens as
//     Update.NumOutputTokens, and TTFT, TPOT, ITL, prefill and decode are
//     absent unless an engine recording into the same tracker gives them.
//   - The response's id and model go on the root (gen_ai.response.id,
//     gen_ai.response.model, cut at 256 bytes and counted in
//     llm.attributes.truncated), with http.response.status_code.
//   - The usage's cached prompt tokens (prompt_tokens_details.cached_tokens,
//     the Responses API's input_tokens_details.cached_tokens), streamed or
//     not, go to otelstats.Request.CachedTokens: the root's
//     gen_ai.usage.cache_read.input_tokens and RequestStats.NumCachedTokens
//     (CachedFromUsage) when no engine recording into the same tracker
//     reported its own count, which wins. They are not prefix-cache hits
//     (llm.server.prefix_cache.*).
//   - Token counts written as integral floats (12.0) are read; a count of
//     another kind (a fraction, a string) is ignored, not its chunk.
//   - With several choices (n > 1), each choice's finish reason goes on
//     the root's gen_ai.response.finish_reasons, in choice order (at most
//     otelstats.MaxChoiceFinishReasons); the request's own finish reason
//     (RequestStats.FinishReason, llm.finish_reason on the metrics) is the
//     one of the choice that finished last (of a JSON response, the last
//     choice with one).
//   - stream and stream_options.include_usage are read as vLLM reads them
//     (pydantic's lax booleans): true, 1, 1.0, and "true", "1", "yes",
//     "on", "t", "y" in any case are true; anything else is false.
//   - A JSON response compressed with gzip or deflate (a hosted API
//     answering a client that accepts them, as the Python SDK does) is
//     set aside as it goes by (up to WithEventLimit, within the budget)
//     and read when it ends; the client gets it as it came. A compressed
//     stream, another coding (br, zstd), a compressed body longer than
//     that, or another media type passes unread. A response with no
//     Content-Type, or text/plain (what net/http sniffs for a Go server
//     that set none), is read as the request asked: SSE for a stream (as
//     the SDKs read it), JSON otherwise.
//
// When a usage came, the request's output tokens equal its
// completion_tokens (never fewer than the content chunks): while the
// layer waits for a final usage its deliveries are held (at most 4,096),
// then the usage is spread over them in proportion to their choices;
// otherwise the last delivery carries what the others did not. A stream
// whose usage counts tokens that no chunk showed (a stop token alone) is
// counted as a response in one piece is: FINISHED carries them, with no
// token times.
//
// # Input processing and the prompt's size
//
// INPUT_PROCESSED carries the prompt's size and the sampling parameters,
// and must precede the output. It is recorded:
//
//   - when the handler reports its tokenization with InputProcessed (exact
//     time and count: do this in servers that tokenize);
//   - else, when a usage gives the prompt's size before any output had to
//     be recorded — a response in one piece, or a stream that asked for
//     stream_options.include_usage (the Responses API always reports it) —
//     timed when the body was read;
//   - else not at all: the prompt's size, if a usage brings it at the end,
//     goes on FINISHED, and the sampling parameters are not recorded.
//
// Never a made-up prompt size: absent is absent.
//
// # How a request ends
//
// In this order:
//
//   - The client went away before the response was complete (a write to it
//     failed, but not as net/http refuses a handler's own slip, a body
//     after a 204 or past its Content-Length; or its context ended while
//     the request was served): abort,
//     at the moment it went. Complete means, for a stream, [DONE], a final
//     Responses API event, or a finish reason for every choice (the
//     request's n, 1 by default, for each prompt of a completion's batch —
//     one not read to its end is complete only at its stream's end — or
//     as many as the stream showed); for
//     JSON, a first byte written. So a client that stops reading at the
//     finish reason, before the usage chunk and [DONE], was served: the
//     request ends with that finish reason. One that leaves while a choice
//     is still streaming aborts, whichever others finished. A client that
//     left with every byte of a body whose Content-Length it was told did
//     not abort: it closes at the last byte, which may be before the
//     handler returns.
//   - The upstream failed before it answered (proxy): error, error.type
//     connection_refused (502 to the client), timeout (504) or
//     upstream_error (502).
//   - The handler panicked (middleware): error, error.type "panic"; the
//     panic goes on.
//   - A status ≥ 400: error, error.type the status code.
//   - Copying the upstream's body failed (proxy): error, upstream_error.
//   - An error event in the stream: error, stream_error
//     (response_failed for a failed Responses API response). An error is
//     data with an "error" member or object "error", an event of type
//     error, or an "error" field line: llama.cpp's server wrote its
//     mid-stream failures as `error: {...}`, then [DONE].
//   - The response ended early without a transport error — a stream
//     that was not complete (as above: no [DONE], no final Responses
//     event, and a choice without its finish reason), a JSON object that
//     never closed (a close-delimited body cut short): error,
//     response_truncated. A stream whose every choice finished needs no
//     [DONE]: servers that never send it (TGI before 2.2) end there. A
//     204 or 304 has no body (RFC 9110): it is whole at its header,
//     stream or not.
//   - Otherwise the finish reason read from the response, "stop" if none.
//
// # Incoming trace context
//
// The incoming traceparent (WithPropagators; W3C Trace Context by default)
// makes the root span a child of the caller's span. Per SPEC §6 its
// sampled flag decides sampling only when trusted:
//
//   - Trusted (WithTrustIncomingSampling(Func)): the span context is passed
//     on as sent and the tracker is told per request (Arrival.TrustParent);
//     a trusted caller may ask for a detail level with DetailHeader.
//   - Untrusted (the default): the caller's trace and parent ids are kept,
//     so our spans join its trace, but its flag decides nothing.
//   - Public (WithPublicEndpoint(Func); trusted requests excepted): the
//     caller's trace is not joined; the root starts a new trace and links
//     to the caller's span (Arrival.Link), so a caller cannot even choose
//     the trace our spans land in.
//
// The proxy's X-Forwarded-* headers follow the same trust: it appends the
// client's address to an incoming X-Forwarded-For and passes on the
// incoming X-Forwarded-Host and -Proto (setting them when absent) and an
// incoming Forwarded (RFC 7239) as it came, as httputil.ReverseProxy's
// Director form does, so that behind a load balancer the upstream still
// sees the original client; from a public, untrusted caller it passes none
// of them on: X-Forwarded-For is the caller's address alone, host and
// scheme the proxy's own.
//
// The middleware's handler gets a context carrying the root span context
// (spans it starts are children of the root) and the otelstats.Request
// (otelstats.RequestFromContext), whose ID an in-process engine uses for
// its updates.
//
// # The proxy's spans
//
// Beside the tracker's root and children, when the tracker keeps the
// trace (its end-of-request sampling decides after the response ended):
//
//	span                        kind      from → to
//	POST                        CLIENT    request sent upstream → its body ended
//	llm.proxy.wait_first_token  INTERNAL  request sent upstream → first content chunk (a response in one piece: its first byte)
//	llm.proxy.stream            INTERNAL  first content chunk → last byte delivered; events llm.proxy.stall
//
// The upstream receives a traceparent naming the CLIENT span, so the
// engine's own request span (vLLM's llm_request) is its child. Its id is
// chosen before the span exists, which needs the TracerProvider built with
// sdktrace.WithIDGenerator(spans.IDGenerator()) — as the tracker does.
// The spans are built when the request has ended; given the processor the
// tracker exports through (WithSpanProcessor, WithResource; otelconf's
// Providers.SpanExport), they are handed to it as finished spans, without
// the Tracer's live-span machinery, as the tracker hands its own trees.
// A gap between content chunks longer than StallPolicy.Factor (8) times
// the median of the request's previous gaps (the last 64) and longer than
// StallPolicy.Min (100 ms), once 4 gaps are known, is a stall: an event on
// llm.proxy.stream and one more in the llm.proxy.stalls counter.
//
// # HTTP semantic conventions
//
// The layer emits what otelhttp emits, without depending on it (the
// library's module takes no contrib dependency, and the tracker's root is
// already the request's SERVER span): http.server.request.duration with
// http.request.method, url.scheme, http.route, http.response.status_code,
// network.protocol.* and error.type (the status code of a 5xx, or the
// failure); the proxy's http.client.request.duration for its upstream
// call (error.type abort, not upstream_error, for a call cancelled because
// the client left mid-response; none once the client had it all);
// http.request.method, http.route, url.scheme, server.address and
// server.port (from Host, capped at 255 bytes), user_agent.original
// (capped at 512) and client.address on the root. The duration buckets are
// otelhttp's extended to 640 s. The middleware counts traced routes only;
// the proxy counts everything it serves. WithHTTPMetrics(false) turns the
// metrics off where otelhttp already wraps the handler.
//
// # Server-Timing
//
// WithServerTiming(true) tells the client what the tracker knows of its
// request, and its traceparent, so it can open its trace:
//
//	Server-Timing: queue;dur=1.204, prefill;dur=40.113, ttft;dur=45.020, decode;dur=800.310, e2e;dur=845.330, traceparent;desc="00-4bf9…-00f0…-01"
//
// in milliseconds: a header on a response in one piece (what is known when
// its header is written: an in-process engine's queue, prefill and decode,
// e2e so far), a trailer on a stream (announced in the Trailer header;
// Go's HTTP client reads it into Response.Trailer once the body is read).
// It is off by default: it hands the caller the trace id.
//
// # Cost
//
// The proxy copies each response through ReverseProxy and flushes each
// write to the client before it reads the chunk (the client never waits
// for the layer's parsing); a content chunk costs about a microsecond to
// read (a scanner of the usual chunk shape, encoding/json for anything
// else), the request's parts are one allocation, and its copy buffer is
// pooled. BENCHMARKS.md ("The proxy beside httputil.ReverseProxy")
// measures it against ReverseProxy in one run: the TTFT it adds is tens of
// microseconds; its CPU per request is within about 10% of ReverseProxy's
// with export off, and 20-30% above it while exporting, most of that the
// OpenTelemetry SDK's OTLP encoding.
//
// # Bounds
//
// Everything from outside is bounded: the fields kept of a body (4 KiB of
// model, 8 KiB of stop, 64 bytes per number), one SSE event and a
// response's choices (WithEventLimit, 1 MiB), the choices read of one
// chunk or response (129: each past OpenAI's 128 is read into the last in
// turn, so the last stands), the deliveries held (4,096),
// the stall events on a span (32), strings put on spans (see above), and
// the bytes of bodies one Handler or Proxy holds over all its requests
// (WithBodyBudget, 64 MiB; refusals counted in
// llm.http.body_budget.refused). Nothing the layer reads fails or delays a
// request. The server's own limits (ReadHeaderTimeout, ReadTimeout,
// IdleTimeout, MaxHeaderBytes) are the embedding program's; NewTransport
// bounds the proxy's upstream calls (dial 10 s, response headers 10 min:
// a response that is not streamed sends them when it is done).
//
// # Models on metrics
//
// The tracker decides which model names keep their own metric series
// (otelstats.WithModels; without it, the first 64 seen). A proxy in front
// of untrusted clients should give it the models it serves — UpstreamModels
// reads them from the upstream's /v1/models, as `llmtrace proxy` does —
// with UnknownModel beside them, so that junk names cannot push the real
// ones into "other".
//
// Handler and Proxy are safe for concurrent use; their zero values are not
// usable (use the constructors).
package openaihttp
