package otelstats

import (
	"fmt"
	"strconv"
)

// Detail is how much of a request's life its trace shows. The zero Detail
// inherits the tracker's level (WithDetail, else DetailTree).
type Detail uint8

// Detail levels. Level numbers (otelconf's LLMTRACE_DETAIL, the HTTP header) are the
// constants' values minus one: 0 = DetailRoot … 3 = DetailTokens.
const (
	DetailInherit Detail = iota
	// DetailRoot (level 0) emits the root span alone, with the
	// gen_ai.latency.* attributes vLLM puts on its request span.
	DetailRoot
	// DetailTree (level 1, the default) emits SPEC §3's tree.
	DetailTree
	// DetailSteps (level 2) adds an llm.decode.step event per engine step
	// to the decode segments (step index, batch size). The request keeps
	// one record per step (capped at 4,096).
	DetailSteps
	// DetailTokens (level 3) adds the token delivery times as one compact
	// int64 array attribute per decode segment
	// (llm.decode.token_offsets_us, microseconds from the segment's start)
	// — never one event per token. Capped at 4,096 tokens.
	DetailTokens
)

// maxDetailRecords caps the per-step and per-token records of levels 2–3.
const maxDetailRecords = 4096

// ParseDetail reads a level number 0–3.
func ParseDetail(s string) (Detail, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 3 {
		return DetailInherit, fmt.Errorf("llmtrace: detail level %q: want 0, 1, 2 or 3", s)
	}
	return Detail(n + 1), nil
}
