// Package sim is a simulated LLM serving engine that schedules like vLLM V1
// and is instrumented only through llmtrace's public API.
//
// The engine core runs continuous batching: an FCFS waiting queue, a
// per-step token budget, a cap on running requests, chunked prefill, a paged
// KV cache with prefix caching by block hashes, and recompute preemption of
// the newest running request when a running request needs a block and none
// is free. The frontend tokenizes the prompt, hands the request to the
// engine, and detokenizes and delivers every token shortly after the engine
// step that produced it.
//
// The serving features of SPEC §7–9 are on the same clock: speculative
// decoding (Config.Spec: a draft proposes tokens, the target accepts a
// prefix), LoRA adapters (the workload's Adapter, at most Config.MaxLoRAs in
// a batch), multimodal requests (the workload's Images, encoded in the step
// that first needs them, before or during prefill), and, through RunPD,
// disaggregated prefill/decode: a router sends each request to a prefill
// instance and then to a decode instance, each an engine with its own
// tracker, and the decode instance loads the prompt's KV cache over a link.
//
// Time is virtual: events (arrivals, input processing, engine steps,
// deliveries) are processed in time order and the clock jumps from one to
// the next, so an hour of traffic replays in seconds; Config.Realtime paces
// it against the wall clock instead. Every update goes to the
// otelstats.Tracker with its virtual time: the frontend through the
// Tracker.Arrive handle (InputProcessed, Detokenized, Finish), the engine
// through Tracker.Step (Queued, Scheduled, Preempted, Decoded, SpecDecoded,
// Finished and SchedulerStats) and, for the kinds a Step has no entry for (REMOTE_KV_*,
// ENCODING, ENCODED), through the handle's Record.
//
// The simulator also keeps each request's true phase boundaries (Truth), so
// tests can check that what llmtrace derives equals what happened.
package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/otelstats"
)

// Truth is what really happened to one request on one recorder (an engine
// instance with its frontend, or the router), known to the simulator. Zero
// times never happened.
type Truth struct {
	// ID is the request's id; empty for a request that never reached this
	// recorder (a decode instance's share of a request its prefill
	// instance rejected).
	ID string
	// Arrival is ARRIVED; InputProcessed is INPUT_PROCESSED.
	Arrival, InputProcessed time.Time
	// FirstQueued is when the engine first put the request in its waiting
	// queue; FirstScheduled when it first scheduled prompt tokens of it.
	FirstQueued, FirstScheduled time.Time
	// FirstToken is when the frontend delivered the first output token.
	FirstToken time.Time
	// Finish is when the frontend delivered the last token and finished.
	Finish time.Time
	// EngineFinish is when the engine finished the request.
	EngineFinish time.Time

	PromptTokens int
	// NoPromptCount: the recorder never learned the prompt's size (the
	// router learns it from the response's usage, which an aborted
	// response lacks).
	NoPromptCount bool
	OutputTokens  int
	// CachedTokens are the prompt tokens served from the prefix cache at the
	// first scheduling.
	CachedTokens int
	// RecomputeCachedTokens are cache hits of recompute prefills after
	// preemptions.
	RecomputeCachedTokens int
	Preemptions           int
	// Preempted sums the time from each preemption to the next scheduling.
	Preempted time.Duration
	// SharedPrefix is the length of the system prompt the prompt starts
	// with (0 for none).
	SharedPrefix int
	FinishReason string
	ErrorType    string

	// PDRole is the instance's part in P/D ("" unified and on the router).
	PDRole string
	// Adapter is the LoRA adapter that served the request.
	Adapter string
	// The decode instance's KV transfer: REMOTE_KV_WAIT and
	// REMOTE_KV_READY, the tokens loaded, their bytes, whether it failed.
	KVSource        string
	KVWait, KVReady time.Time
	RemoteTokens    int
	KVBytes         int64
	KVFailed        bool
	// The router's view of P/D: sent to P, P's response, sent to D.
	PrefillSent, PrefillResponded, DecodeSent time.Time
	// Speculative decoding: draft tokens proposed and accepted, and the
	// steps that had a draft.
	DraftTokens, AcceptedTokens, SpecSteps int
	// Multimodal: the images, the encoder runs (before or during prefill),
	// how many were encoder-cache hits, and their summed time.
	Images                     int
	EncoderRuns                int
	EncodeBefore, EncodeDuring int
	EncoderHits                int
	EncodeTime                 time.Duration
}

// Progress is reported after every finished request.
type Progress struct {
	Done, Total int
	Now         time.Time // virtual
}

// Result is a finished simulation.
type Result struct {
	// Requests are in workload order, as the client saw them: the
	// engine's records, or with RunPD the router's.
	Requests []Truth
	// Prefill and Decode are each P/D instance's records (RunPD only), in
	// workload order.
	Prefill, Decode []Truth
	// Steps and Preemptions over all instances.
	Steps       int
	Preemptions int
	// Start is the first arrival, End the last event (virtual times).
	Start, End time.Time
	// MaxRunning and MaxWaiting are the largest batch and queue seen on
	// any instance.
	MaxRunning, MaxWaiting int
	// Rejections counts updates the trackers rejected (a simulator bug if
	// not zero); FirstRejection is the first of them.
	Rejections     int
	FirstRejection error
	// Instances are the engines, each with its load over time.
	Instances []Instance
	// Spec counts speculative decoding per draft position.
	Spec SpecStats
}

// Instance is one engine's share of a run.
type Instance struct {
	Name, Role             string
	Steps, Preemptions     int
	MaxRunning, MaxWaiting int
	// MaxAdapters is the most distinct LoRA adapters one batch held.
	MaxAdapters int
	// Load is the scheduler's state over time, from the stats of every
	// step (what the engine records as SchedulerStats).
	Load []LoadPoint
	// LoadWidth is the time each point covers.
	LoadWidth time.Duration
}

// LoadPoint is the scheduler's state over [At, At+Instance.LoadWidth): the
// largest batch, queue and KV-cache use seen at the end of a step, and the
// preemptions.
type LoadPoint struct {
	At               time.Time
	Running, Waiting int
	KVCacheUsage     float64
	Preemptions      int
}

// SpecStats counts speculative decoding by draft position: in Steps steps,
// Drafted[i] proposed a token at position i, Reached[i] of them had every
// position before i accepted (so position i was judged), and Accepted[i]
// had it accepted. DraftTokens and Tokens are the draft tokens and the
// tokens those steps yielded (accepted + 1 each).
type SpecStats struct {
	Steps                      int64
	Drafted, Reached, Accepted [MaxDraftTokens]int64
	DraftTokens, Tokens        int64
}

// Finish reasons and error types the simulator produces.
const (
	ReasonStop             = otelstats.FinishStop
	ReasonLength           = otelstats.FinishLength
	ReasonAbort            = otelstats.FinishAbort
	ReasonRemoteDecode     = otelstats.FinishRemoteDecode
	ErrContextLenExceeded  = "context_length_exceeded"
	requestIDPrefix        = "req-"
	checkContextEveryEvent = 1024
)

// Event kinds.
const (
	evArrive        uint8 = iota // at an instance's frontend
	evInputDone                  // the frontend tokenized the prompt
	evAtEngine                   // the request reached the engine core
	evStepEnd                    // the engine's forward pass is done
	evDeliver                    // the frontend delivers tokens
	evAbortAtEngine              // the frontend's abort reached the engine
	evKVDone                     // a decode instance's KV transfer ended
	evRouterArrive               // a client request reached the router
	evRouterPrefill              // the prefill instance's response reached the router
	evRouterTokens               // the decode instance's tokens reached the router
	evAbortFrontend              // the router's abort reached the decode instance
)

type event struct {
	at   int64 // virtual ns since the Unix epoch
	seq  uint64
	req  int32 // a request of the instance, or a route
	n    int32 // tokens (evDeliver, evRouterTokens); 1 = failed (evRouterPrefill)
	kind uint8
	inst uint8
	last bool // the final tokens
}

type sim struct {
	cfg Config
	ctx context.Context

	events eventHeap
	seq    uint64
	now    int64
	inst   []*instance
	router *router
	done   int
	total  int
	res    Result

	sampling, prefillSampling *otelstats.SamplingParams

	wallStart time.Time
	virtStart int64
}

// Run simulates one engine serving reqs (in arrival order) and records
// everything in tr. It returns when every request has finished, or with
// ctx's error. Run does not shut tr down.
func Run(ctx context.Context, cfg Config, reqs []workload.Request, tr *otelstats.Tracker) (*Result, error) {
	if tr == nil {
		return nil, errors.New("sim: nil tracker")
	}
	s, err := newSim(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.checkWorkload(reqs); err != nil {
		return nil, err
	}
	e := s.addInstance("engine", "", tr)
	s.setup(reqs, e, nil)
	return s.run(reqs)
}

// PDTrackers are the three recorders of a P/D deployment. They may share a
// TracerProvider: the prefill and decode instances' request trees then
// join the router's trace as children of its root span.
type PDTrackers struct {
	Router, Prefill, Decode *otelstats.Tracker
}

// RunPD simulates a P/D deployment serving reqs: each request arrives at a
// router, which sends it to the prefill instance (max_tokens 1) and, with
// P's response, to the decode instance; the decode instance loads the
// prompt's KV cache from the prefill instance (Config.PD) and streams the
// tokens back through the router. The trace context goes along as a W3C
// traceparent on both hops. Result.Requests are the router's records.
func RunPD(ctx context.Context, cfg Config, reqs []workload.Request, t PDTrackers) (*Result, error) {
	if t.Router == nil || t.Prefill == nil || t.Decode == nil {
		return nil, errors.New("sim: P/D needs three trackers")
	}
	s, err := newSim(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.checkWorkload(reqs); err != nil {
		return nil, err
	}
	p := s.addInstance(cfg.PD.Prefill, otelstats.PDRolePrefill, t.Prefill)
	d := s.addInstance(cfg.PD.Decode, otelstats.PDRoleDecode, t.Decode)
	s.router = &router{tr: t.Router, p: p, d: d, prop: propagation.TraceContext{}}
	s.setup(reqs, p, d)
	res, err := s.run(reqs)
	if err != nil {
		return nil, err
	}
	res.Requests, res.Prefill, res.Decode = s.router.truths, p.truths, d.truths
	return res, nil
}

func newSim(ctx context.Context, cfg Config) (*sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if cfg.Operation == "" {
		cfg.Operation = "chat"
	}
	s := &sim{cfg: cfg, ctx: ctx}
	temp, topP, one := 0.7, 0.95, int64(1)
	s.sampling = &otelstats.SamplingParams{Temperature: &temp, TopP: &topP}
	// The router asks the prefill instance for one token, as vLLM's P/D
	// proxies do.
	s.prefillSampling = &otelstats.SamplingParams{Temperature: &temp, TopP: &topP, MaxTokens: &one}
	return s, nil
}

// checkWorkload reports requests the engine could never serve.
func (s *sim) checkWorkload(reqs []workload.Request) error {
	if s.cfg.encoderBudget() >= s.cfg.Multimodal.TokensPerImage {
		return nil
	}
	for i := range reqs {
		if reqs[i].Images > 0 {
			return fmt.Errorf("sim: the encoder budget of %d tokens a step cannot encode an image of %d tokens",
				s.cfg.encoderBudget(), s.cfg.Multimodal.TokensPerImage)
		}
	}
	return nil
}

func (s *sim) run(reqs []workload.Request) (*Result, error) {
	if len(reqs) > 0 {
		s.virtStart = reqs[0].Arrival.UnixNano()
		s.res.Start = reqs[0].Arrival
	}
	s.wallStart = time.Now()
	if err := s.loop(); err != nil {
		return nil, err
	}
	s.res.End = vt(s.now)
	for _, in := range s.inst {
		r := in.result()
		s.res.Instances = append(s.res.Instances, r)
		s.res.Steps += r.Steps
		s.res.Preemptions += r.Preemptions
		s.res.MaxRunning = max(s.res.MaxRunning, r.MaxRunning)
		s.res.MaxWaiting = max(s.res.MaxWaiting, r.MaxWaiting)
	}
	s.res.Requests = s.inst[0].truths
	return &s.res, nil
}

// vt turns virtual nanoseconds into a time.Time (UTC, no monotonic reading).
func vt(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	s.events.push(e)
}

func (s *sim) loop() error {
	n := 0
	for s.events.len() > 0 {
		e := s.events.pop()
		if n++; n%checkContextEveryEvent == 0 {
			if err := s.ctx.Err(); err != nil {
				return err
			}
		}
		if s.cfg.Realtime {
			if err := s.pace(e.at); err != nil {
				return err
			}
		}
		s.now = e.at
		if err := s.dispatch(&e); err != nil {
			return err
		}
	}
	if s.done != s.total {
		return fmt.Errorf("sim: %d of %d requests never finished", s.total-s.done, s.total)
	}
	return nil
}

func (s *sim) dispatch(e *event) error {
	switch e.kind {
	case evRouterArrive:
		s.router.arrive(s, e.req)
		return nil
	case evRouterPrefill:
		s.router.prefillDone(s, e.req, e.n != 0)
		return nil
	case evRouterTokens:
		s.router.tokens(s, e.req, int(e.n), e.last)
		return nil
	}
	in := s.inst[e.inst]
	r := &in.reqs[e.req]
	switch e.kind {
	case evArrive:
		in.arrive(r)
	case evInputDone:
		in.inputDone(r)
	case evAtEngine:
		r.state = stWaiting
		in.inbox = append(in.inbox, r)
		return in.wake()
	case evStepEnd:
		in.endStep()
		return in.startStep()
	case evDeliver:
		in.deliver(r, int(e.n), e.last)
	case evAbortFrontend:
		in.abortFrontend(r)
	case evAbortAtEngine:
		if r.state == stDone {
			return nil // the engine finished it before the abort arrived
		}
		in.aborts = append(in.aborts, r)
		return in.wake()
	case evKVDone:
		if err := in.kvDone(r, e.n != 0); err != nil {
			return err
		}
		return in.wake()
	}
	return nil
}

// pace sleeps until the wall clock reaches virtual time at.
func (s *sim) pace(at int64) error {
	target := s.wallStart.Add(time.Duration(float64(at-s.virtStart) / s.cfg.Speedup))
	d := time.Until(target)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *sim) reject(err error) {
	if err == nil {
		return
	}
	s.res.Rejections++
	if s.res.FirstRejection == nil {
		s.res.FirstRejection = err
	}
}

// clientDone counts a request the client is done with.
func (s *sim) clientDone() {
	s.done++
	if s.cfg.Progress != nil {
		s.cfg.Progress(Progress{Done: s.done, Total: s.total, Now: vt(s.now)})
	}
}
