package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Config describes the simulated engine and its frontend.
type Config struct {
	// Model and Operation name the requests ("chat llama-3-8b").
	Model     string
	Operation string

	// BlockSize is the KV-cache block size in tokens (vLLM's default 16).
	BlockSize int
	// NumBlocks is the number of KV-cache blocks. It bounds how many tokens
	// the running requests can hold; when a running request needs a block
	// and none is free, the newest running request is preempted.
	NumBlocks int
	// MaxNumBatchedTokens is the per-step token budget (vLLM's
	// max_num_batched_tokens; 8192 with chunked prefill).
	MaxNumBatchedTokens int
	// MaxNumSeqs caps the running requests (vLLM's max_num_seqs, 256).
	MaxNumSeqs int
	// MaxModelLen is the context window. A prompt that does not fit is
	// rejected by the frontend with error.type context_length_exceeded; an
	// output that would overflow it is cut and finishes with "length".
	MaxModelLen int

	Cost     Cost
	Frontend Frontend

	// Spec turns on speculative decoding (SPEC §8) when Spec.K > 0.
	Spec Spec
	// MaxLoRAs is how many distinct LoRA adapters one batch may hold
	// (vLLM's max_loras): a waiting request whose adapter would be one too
	// many is skipped until a slot frees. Requests get their adapter from
	// the workload.
	MaxLoRAs int
	// Multimodal is the encoder of requests that carry images (the
	// workload's Images).
	Multimodal Multimodal
	// PD configures disaggregated prefill/decode (RunPD; SPEC §7).
	PD PD

	// Prefixes are the lengths in tokens of the shared system prompts the
	// synthetic prompts start with. Each request starts with one of those
	// that leaves at least MinUnique tokens of its own, or with none.
	Prefixes []int
	// MinUnique is the least number of request-specific prompt tokens.
	MinUnique int

	// AbortRate is the fraction of requests, in [0, 1], whose client
	// disconnects halfway through the response: after half of its output
	// tokens (at least one) have been delivered, the frontend aborts the
	// request and tells the engine, which frees it at its next step (vLLM's
	// abort path). Requests of one output token never abort. 0 (the
	// default) aborts nothing.
	AbortRate float64

	// Seed drives the choice of system prompt per request, and which
	// requests abort.
	Seed uint64

	// Realtime paces the simulation against the wall clock, Speedup times
	// faster than the workload's own time (1 = real time). Without it the
	// virtual clock jumps from event to event and an hour replays in
	// seconds. The times recorded are the virtual times either way.
	Realtime bool
	Speedup  float64

	// Progress, when set, is called after every finished request, on the
	// simulation's goroutine.
	Progress func(Progress)
}

// Cost is the step-time model: one engine step (one forward pass over the
// batch) takes Fixed + PerPrefillToken × prompt tokens computed in the step
// + PerDecodeSeq × requests decoding one token in the step.
//
// The defaults approximate Llama-3-8B in bf16 on one A100-80GB under vLLM;
// they are round numbers, not a calibrated model:
//
//   - Fixed 8 ms: a forward pass streams all ~16 GB of weights from HBM,
//     8 ms at the A100's ~2 TB/s (5 ms on an H100). Public single-request
//     vLLM measurements of Llama-3(.1)-8B show 7–13 ms per output token on
//     A100s (e.g. ~75 tokens/s on an A100-40GB).
//   - PerPrefillToken 80 µs: prefill is compute-bound, ~16 GFLOP per token
//     for 8B parameters; at ~60% of the A100's 312 TFLOPS that is ~85 µs,
//     i.e. 12–13 k prompt tokens/s, in line with published vLLM prefill
//     throughput for 8B models on one A100 (10–15 k tokens/s).
//   - PerDecodeSeq 100 µs: each extra decoding sequence reads its KV cache
//     (~128 KiB per token of context for Llama-3-8B) and adds a little
//     compute; published batch sweeps show decode throughput growing almost
//     linearly up to a batch of ~8–16 with per-token latency rising by a few
//     ms, i.e. on the order of 0.1 ms per sequence at ~1k tokens of context.
//
// The serving features add, with the same caveat:
//
//   - PerVerifyToken 40 µs per draft token the target verifies: half a
//     prefill token, as the draft tokens ride on the decode pass's weight
//     reads but add attention and matmul work.
//   - DraftPass 400 µs per draft position: a small draft head (EAGLE-style,
//     about a layer of the target) runs once per position for the batch.
//   - PerAdapter 300 µs per distinct LoRA adapter in the batch: the
//     segmented LoRA matmuls (punica/SGMV) cost a few percent of a step each.
//   - EncodeRun 1 ms + PerEncoderToken 5 µs: a ViT-L/14 vision encoder at
//     336 px (576 tokens an image) takes ~4 ms an image on an A100.
type Cost struct {
	Fixed           time.Duration
	PerPrefillToken time.Duration
	PerDecodeSeq    time.Duration

	PerVerifyToken  time.Duration
	DraftPass       time.Duration
	PerAdapter      time.Duration
	EncodeRun       time.Duration
	PerEncoderToken time.Duration
}

// StepTime is the duration of a step that computes prefill prompt tokens
// and decodes one token for each of decoding requests.
func (c Cost) StepTime(prefill, decoding int) time.Duration {
	return c.Fixed + time.Duration(prefill)*c.PerPrefillToken + time.Duration(decoding)*c.PerDecodeSeq
}

// Spec is speculative decoding: in every decode step a draft proposes up to
// K tokens per request, the target verifies them in the same forward pass
// and accepts a prefix of them, and the step yields the accepted tokens
// plus one of the target's own (SPEC §8: tokens per step = accepted + 1).
type Spec struct {
	// K is the draft length (vLLM's num_speculative_tokens); 0 is off.
	K int
	// Accept is the acceptance model: Accept[i] is the probability that
	// draft position i is accepted when positions 0 … i−1 were; the last
	// value holds for later positions. Acceptance falls with the position,
	// as measured for EAGLE and draft models.
	Accept []float64
}

// Multimodal configures the vision encoder. vLLM V1 runs it inside the
// engine step that first schedules prompt tokens covering an image's
// placeholder tokens, within a per-step encoder budget, and keeps outputs
// in an encoder cache; so does the simulator.
type Multimodal struct {
	// TokensPerImage is how many prompt (placeholder) tokens an image
	// takes (576 for LLaVA-1.5's CLIP ViT-L/14 at 336 px).
	TokensPerImage int
	// EncoderBudget bounds the encoder tokens computed in one step (vLLM's
	// max_num_encoder_input_tokens); a chunk that would need more is cut
	// before the image, which is then encoded in a later step — during
	// prefill. 0 means MaxNumBatchedTokens.
	EncoderBudget int
	// EncoderCacheImages is the encoder cache's capacity in images; an
	// image still in it (a request preempted and resumed) is not encoded
	// again: a cache hit.
	EncoderCacheImages int
}

// PD is a disaggregated deployment (RunPD): a router sends each request to
// a prefill instance, which computes the prompt and its first token, then
// to a decode instance, which loads the prompt's KV cache from the prefill
// instance over a link and decodes. Both instances are engines configured
// as Config.
type PD struct {
	// LinkGbps is the link's bandwidth in gigabits per second (RDMA NICs
	// are 100–400 Gb/s); a transfer takes Latency + its bytes / LinkGbps.
	LinkGbps float64
	Latency  time.Duration
	// BytesPerToken is the KV cache of one token: 2 (K and V) × layers ×
	// KV heads × head dim × 2 bytes, 128 KiB for Llama-3-8B in bf16.
	BytesPerToken int64
	// FailureRate is the fraction of transfers, in [0, 1], that fail; the
	// decode instance then recomputes the prompt itself.
	FailureRate float64
	// Hop is the network time between the router and an instance, each way.
	Hop time.Duration
	// Prefill and Decode name the instances (the transfer's kv_source).
	Prefill, Decode string
}

// TransferTime is how long moving tokens' KV cache over the link takes.
func (p PD) TransferTime(tokens int) time.Duration {
	if !(p.LinkGbps > 0) {
		return p.Latency
	}
	bits := float64(int64(tokens)*p.BytesPerToken) * 8
	return p.Latency + time.Duration(math.Round(bits/(p.LinkGbps*1e9)*1e9))
}

// Frontend is the API server's share of the time: input processing
// (tokenization and chat templating), the hop to the engine process, and
// output processing (detokenization and streaming) after each engine step.
// The defaults are small, plausible numbers for vLLM's OpenAI server on a
// fast CPU; they exist so the frontend's spans are visible, not to model a
// particular machine.
type Frontend struct {
	// InputBase + InputPerToken × prompt tokens is INPUT_PROCESSED − ARRIVED.
	InputBase     time.Duration
	InputPerToken time.Duration
	// ToEngine is the hop from the frontend to the engine core (IPC).
	ToEngine time.Duration
	// Deliver is from the engine's output to the token's delivery to the
	// client (DETOKENIZED).
	Deliver time.Duration
	// DetokenizeBusy is the detokenizer's busy time per delivery.
	DetokenizeBusy time.Duration
}

// DefaultConfig returns the defaults of the demo.
//
// The KV cache is deliberately small: 2,048 blocks of 16 tokens hold 32 k
// tokens, about what a 24 GB card has left for Llama-3-8B's cache (at
// 128 KiB per token, 4 GiB). An 80 GB A100 would hold ~14× more and would
// never preempt at this load; the small cache lets the default run show
// preemptions.
func DefaultConfig() Config {
	return Config{
		Model:               "llama-3-8b",
		Operation:           "chat",
		BlockSize:           16,
		NumBlocks:           2048,
		MaxNumBatchedTokens: 8192,
		MaxNumSeqs:          256,
		MaxModelLen:         8192,
		Cost: Cost{
			Fixed:           8 * time.Millisecond,
			PerPrefillToken: 80 * time.Microsecond,
			PerDecodeSeq:    100 * time.Microsecond,
			PerVerifyToken:  40 * time.Microsecond,
			DraftPass:       400 * time.Microsecond,
			PerAdapter:      300 * time.Microsecond,
			EncodeRun:       time.Millisecond,
			PerEncoderToken: 5 * time.Microsecond,
		},
		Spec:     Spec{Accept: []float64{0.8, 0.7, 0.6, 0.5}},
		MaxLoRAs: 4,
		Multimodal: Multimodal{
			TokensPerImage:     576,
			EncoderCacheImages: 64,
		},
		PD: PD{
			LinkGbps:      100,
			Latency:       500 * time.Microsecond,
			BytesPerToken: 128 << 10,
			Hop:           250 * time.Microsecond,
			Prefill:       "prefill-0",
			Decode:        "decode-0",
		},
		Frontend: Frontend{
			InputBase:      time.Millisecond,
			InputPerToken:  time.Microsecond,
			ToEngine:       200 * time.Microsecond,
			Deliver:        400 * time.Microsecond,
			DetokenizeBusy: 30 * time.Microsecond,
		},
		Prefixes:  []int{1536, 768, 384, 192},
		MinUnique: 32,
		Seed:      1,
		Speedup:   1,
	}
}

// Validate reports a configuration the engine cannot run with.
func (c *Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model is empty"))
	}
	if c.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("block size %d must be positive", c.BlockSize))
	}
	if c.NumBlocks <= 0 {
		errs = append(errs, fmt.Errorf("KV-cache blocks %d must be positive", c.NumBlocks))
	}
	if c.MaxNumBatchedTokens <= 0 {
		errs = append(errs, fmt.Errorf("max batched tokens %d must be positive", c.MaxNumBatchedTokens))
	}
	if c.MaxNumSeqs <= 0 {
		errs = append(errs, fmt.Errorf("max running requests %d must be positive", c.MaxNumSeqs))
	}
	if c.MaxModelLen < 2 {
		errs = append(errs, fmt.Errorf("max model length %d must be at least 2", c.MaxModelLen))
	}
	if c.BlockSize > 0 && c.NumBlocks > 0 && c.MaxModelLen > c.BlockSize*c.NumBlocks {
		// vLLM refuses to start in this case too: a request at the
		// context limit could never be scheduled.
		errs = append(errs, fmt.Errorf("max model length %d exceeds the KV cache (%d blocks × %d tokens = %d)",
			c.MaxModelLen, c.NumBlocks, c.BlockSize, c.NumBlocks*c.BlockSize))
	}
	if k := c.Cost; k.Fixed <= 0 || slices.Min([]time.Duration{k.PerPrefillToken, k.PerDecodeSeq, k.PerVerifyToken,
		k.DraftPass, k.PerAdapter, k.EncodeRun, k.PerEncoderToken}) < 0 {
		errs = append(errs, errors.New("step cost: fixed must be positive, the others non-negative"))
	}
	errs = append(errs, c.validateFeatures()...)
	f := c.Frontend
	if f.InputBase < 0 || f.InputPerToken < 0 || f.ToEngine < 0 || f.Deliver < 0 || f.DetokenizeBusy < 0 {
		errs = append(errs, errors.New("frontend delays must not be negative"))
	}
	for _, p := range c.Prefixes {
		if p <= 0 {
			errs = append(errs, fmt.Errorf("system prefix length %d must be positive", p))
		}
	}
	if !(c.AbortRate >= 0 && c.AbortRate <= 1) {
		errs = append(errs, fmt.Errorf("abort rate %v must be in [0, 1]", c.AbortRate))
	}
	if c.MinUnique < 0 {
		errs = append(errs, fmt.Errorf("min unique tokens %d must not be negative", c.MinUnique))
	}
	if c.Realtime && !(c.Speedup > 0) {
		errs = append(errs, fmt.Errorf("speedup %v must be positive", c.Speedup))
	}
	return errors.Join(errs...)
}

// Bounds of the serving features' settings.
const (
	MaxDraftTokens = 16
	maxImageTokens = 1 << 16
)

func (c *Config) validateFeatures() []error {
	var errs []error
	if c.Spec.K < 0 || c.Spec.K > MaxDraftTokens {
		errs = append(errs, fmt.Errorf("draft length %d must be in [0, %d]", c.Spec.K, MaxDraftTokens))
	}
	if c.Spec.K > 0 && len(c.Spec.Accept) == 0 {
		errs = append(errs, errors.New("speculative decoding needs an acceptance model"))
	}
	for _, p := range c.Spec.Accept {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("acceptance probability %v must be in [0, 1]", p))
		}
	}
	if c.MaxLoRAs < 1 {
		errs = append(errs, fmt.Errorf("max LoRAs per batch %d must be at least 1", c.MaxLoRAs))
	}
	m := c.Multimodal
	if m.TokensPerImage < 1 || m.TokensPerImage > maxImageTokens {
		errs = append(errs, fmt.Errorf("tokens per image %d must be in [1, %d]", m.TokensPerImage, maxImageTokens))
	}
	if m.EncoderBudget < 0 || (m.EncoderBudget > 0 && m.EncoderBudget < m.TokensPerImage) {
		errs = append(errs, fmt.Errorf("encoder budget %d must be 0 (the step budget) or hold one image (%d tokens)", m.EncoderBudget, m.TokensPerImage))
	}
	if m.EncoderCacheImages < 0 {
		errs = append(errs, fmt.Errorf("encoder cache size %d must not be negative", m.EncoderCacheImages))
	}
	return append(errs, c.PD.validate()...)
}

func (p PD) validate() []error {
	var errs []error
	if !(p.LinkGbps > 0) || math.IsInf(p.LinkGbps, 0) {
		errs = append(errs, fmt.Errorf("P/D link bandwidth %v Gb/s must be positive", p.LinkGbps))
	}
	if p.Latency < 0 || p.Hop < 0 || p.BytesPerToken < 0 {
		errs = append(errs, errors.New("P/D latency, hop and bytes per token must not be negative"))
	}
	if !(p.FailureRate >= 0 && p.FailureRate <= 1) {
		errs = append(errs, fmt.Errorf("KV transfer failure rate %v must be in [0, 1]", p.FailureRate))
	}
	if p.Prefill == "" || p.Decode == "" || p.Prefill == p.Decode {
		errs = append(errs, errors.New("the P/D instances need two different names"))
	}
	return errs
}

// encoderBudget is the per-step encoder budget in tokens.
func (c *Config) encoderBudget() int {
	if c.Multimodal.EncoderBudget > 0 {
		return c.Multimodal.EncoderBudget
	}
	return c.MaxNumBatchedTokens
}
