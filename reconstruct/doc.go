// Package reconstruct rebuilds the span tree of SPEC §3 from the one
// request span that vLLM, SGLang and TensorRT-LLM emit (vLLM's
// llm_request), using only the span's start, end and its shared
// gen_ai.latency.* durations (SPEC §10). The engine is not touched.
//
// Compute turns a Span (plain data: start, end, the latency values, token
// counts) and an Engine (which instant each key starts and ends at, per
// engine and version) into a Request: the lifecycle instants ARRIVED,
// QUEUED, first PREFILLING, first token, last token and FINISHED, every one
// inside the span. Request.Tree builds the children (llm.input_processing,
// llm.queue, llm.prefill, one llm.decode segment) with spans.Build, each
// marked llm.reconstructed=true; Request.Stats derives the durations of
// SPEC §2 from the same instants, so a span's waterfall and its metrics
// always agree. ChildSpanIDs derives the children's span ids from the
// engine span's trace and span ids, so an engine span delivered twice (an
// exporter retrying a send that arrived) yields the same children, which a
// backend keeps once. SpanProcessor does all of it inside a Go program that
// receives such spans itself; the Collector component in the otelcol module
// does it for a fleet.
//
// # The mapping, per engine and version
//
// Each engine defines its keys in its own code; the mapping follows that
// code, not the key names. Durations are seconds; "start" is the span's
// start time.
//
// vLLM V1 (tracing added by vLLM pull request 20372, July 2025; Engine
// VLLM, also the SPEC's own formula).
// The span (llm_request, SERVER) is emitted by the frontend's
// OutputProcessor when the request finishes; it starts at arrival_time,
// the frontend's wall clock taken before tokenization, and ends when the
// span is emitted (just after the last output was processed).
// time_to_first_token and e2e are frontend wall-clock intervals from
// arrival (first_token_latency, iteration_timestamp − arrival);
// time_in_queue (scheduled − queued), time_in_model_prefill (first token −
// scheduled), time_in_model_decode (last token − first token) and
// time_in_model_inference come from the engine core's monotonic clock, a
// different process. So:
//
//	ARRIVED      = start
//	first token  = start + time_to_first_token
//	PREFILLING   = first token − time_in_model_prefill
//	QUEUED       = PREFILLING − time_in_queue   (input processing ARRIVED → QUEUED)
//	last token   = first token + time_in_model_decode
//	FINISHED     = start + e2e (the span's end when e2e is absent)
//
// Without a first token, PREFILLING = FINISHED − time_in_model_inference
// where that key is usable (llmtrace's roots of requests aborted during
// prefill). Not for vLLM, whose inference then comes from unset
// timestamps.
//
// vLLM leaves first_token_latency at 0.0 when no token came (an abort
// before the first token) and computes the engine-core durations from
// unset (zero) timestamps then, which gives large negative values: a zero
// time_to_first_token is taken as "no first token" and a negative duration
// as absent (and counted as clamped).
//
// vLLM V0 (tracing added by vLLM pull request 4687, May 2024, until the V0
// engine's removal; Engine VLLMV0). One
// process, one wall clock (time.time()). The span starts at the request's
// arrival_time, set when the engine's add_request is called (before
// tokenization), and ends when the finished request's span is created.
// The keys are time_in_queue = first scheduled − arrival (so the queue
// includes tokenization and there is no separate input processing),
// time_to_first_token and e2e from arrival; there are no prefill, decode
// or inference keys (time_in_scheduler, time_in_model_forward and
// time_in_model_execute are busy times, not instants). So QUEUED = start,
// PREFILLING = start + time_in_queue, first token = start +
// time_to_first_token, no last token (the decode segment runs to
// FINISHED), FINISHED = start + e2e. Its gen_ai.usage.completion_tokens is
// the sum over the request's sequences (n, best_of), counted in
// gen_ai.usage.num_sequences: with more than one, TPOT is absent (decode
// / (sum − 1) is no sequence's time per token).
//
// TensorRT-LLM (tracing added by TensorRT-LLM pull request 5897, August
// 2025; Engine TensorRTLLM). Its tracing module is adapted from vLLM's and
// its keys come from the executor's RequestPerfMetrics
// (_process_req_perf_metrics): time_to_first_token = first token −
// arrival, e2e = last token − arrival, time_in_queue = first scheduled −
// arrival (from arrival, as vLLM V0), -1 for a value it could not compute;
// no prefill or decode keys. So the same instants as vLLM V0, with negative
// values silently absent. What this package could not check in
// TensorRT-LLM's code is the span's own start; it is taken as the
// request's arrival, as in the vLLM code it was adapted from.
//
// SGLang (releases whose request root span carries gen_ai.latency.*: the
// "sglang server" tracer, root span "Req <rid>"; Engine SGLang). The root
// starts at created_time and ends at finished_time, both the tokenizer
// manager's perf_counter mapped to wall time; the keys come from the same
// clock: time_to_first_token and e2e from created_time,
// time_in_model_prefill = first token − api_server_dispatch_finish_time
// (the request handed to the scheduler, so the scheduler's wait is inside
// it), time_in_model_decode = finished − first token,
// time_in_model_inference = finished − the hand-off; no time_in_queue. So
// input processing runs ARRIVED → first token − time_in_model_prefill, the
// prefill span covers the scheduler's wait and the prefill itself, and no
// queue span or queue metric exists. Without a first token (SGLang then
// writes no time_to_first_token or prefill key) the hand-off is FINISHED −
// time_in_model_inference. A disaggregated instance's role is in the root's
// name, not in llm.pd.role ("prefill Req <rid>", "decode Req <rid>"; a
// unified instance's " Req <rid>"): Request.PDRole takes it from there.
//
// llmtrace's own roots (Engine LLMTrace) carry the same keys with SPEC §2's
// meanings; they already have their children, so they are never expanded,
// but their Stats feed the Collector connector's metrics.
//
// # Contradictions
//
// Every instant is clamped into the span and into lifecycle order (ARRIVED
// ≤ QUEUED ≤ PREFILLING ≤ first token ≤ last token ≤ FINISHED ≤ end): a
// duration that would put an instant outside (the two vLLM clocks
// disagreeing, e2e longer than the span) moves it to the bound and counts
// one in Request.Clamped, as does a negative, NaN or infinite duration,
// which is dropped (FromAttributes gives a key whose value is NaN or not a
// number −Inf, so it counts; in a Latency built by hand NaN is a key the
// span lacks). Differences under a microsecond are rounding, not
// contradictions. Nothing is ever negative. A span without a usable
// time_to_first_token, e2e or time_in_queue has nothing to rebuild:
// Compute reports false and the span passes untouched. So does a span
// whose start or end lies outside 1970–2262, the Unix nanoseconds an int64
// holds: its children could not be placed in its century.
package reconstruct
