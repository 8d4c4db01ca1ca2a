package attributes

// Histogram bucket boundaries, in seconds. Where the GenAI conventions give
// advice (TTFT, TPOT, request duration) these start with exactly its
// boundaries and go on past them: the advice stops at 10 s (TTFT), 2.5 s
// (TPOT) and 81.92 s (e2e), and an overloaded server's real values — a TTFT
// p50 of 33 s was measured here — then all land in +Inf and every
// percentile reads as the top bound. The extensions follow vLLM's ranges
// (TTFT up to 2560 s), so panels line up with theirs. The others follow
// vLLM's Prometheus histograms. The functions return fresh slices, so
// callers cannot alter them for others.

// TimeToFirstTokenBuckets is the GenAI convention's advice for
// gen_ai.server.time_to_first_token, extended with vLLM's upper buckets.
func TimeToFirstTokenBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

// TimePerOutputTokenBuckets is the GenAI convention's advice for
// gen_ai.server.time_per_output_token, extended with vLLM's upper buckets.
func TimePerOutputTokenBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
		5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

// RequestDurationBuckets is the GenAI convention's advice for
// gen_ai.server.request.duration, extended by the same doubling to 2621 s
// (vLLM's e2e histogram reaches 7680 s, its phase histograms below too).
func RequestDurationBuckets() []float64 {
	return []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
		163.84, 327.68, 655.36, 1310.72, 2621.44}
}

// InterTokenLatencyBuckets follows vLLM's inter-token latency histogram; the
// conventions have no advice for it.
func InterTokenLatencyBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

// PhaseDurationBuckets follows vLLM's request phase histograms (queue,
// prefill, decode, inference), extended below 0.3 s because queue and prefill
// times on a healthy server are milliseconds and would all land in one bucket.
func PhaseDurationBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}
