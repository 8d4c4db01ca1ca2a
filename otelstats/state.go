package otelstats

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmtrace/llmtrace/attributes"
)

// maxRuns bounds the runs (prefill + decode segments) kept per request; a
// request preempted more often keeps counting preemptions, but its later
// runs merge into the last one.
const maxRuns = 64

// maxChunkEvents bounds the chunk events kept per run.
const maxChunkEvents = 64

// itlBoundsNs are the ITL histogram boundaries in nanoseconds.
var itlBoundsNs = func() []int64 {
	b := attributes.InterTokenLatencyBuckets()
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = int64(math.Round(v * 1e9))
	}
	return out
}()

const nITL = 20 // len(InterTokenLatencyBuckets()) + 1

func init() {
	if len(itlBoundsNs)+1 != nITL || nITL+1 > len(itlRanges) {
		panic("otelstats: nITL does not match the ITL buckets")
	}
}

// itlRanges are the ranges (lo, hi] of itlHist.last: 1 + an ITL bucket, or
// 0, an empty range, before the first gap. Indexed by last masked to the
// array's size, a token's check needs no bounds check and no edge cases.
var itlRanges = func() (out [32]struct{ lo, hi int64 }) {
	for i := range out {
		out[i].lo, out[i].hi = math.MaxInt64, math.MinInt64
	}
	for i := range nITL {
		r := &out[i+1]
		r.lo, r.hi = math.MinInt64, math.MaxInt64
		if i > 0 {
			r.lo = itlBoundsNs[i-1]
		}
		if i < nITL-1 {
			r.hi = itlBoundsNs[i]
		}
	}
	return out
}()

// itlHist aggregates one request's inter-token gaps per histogram bucket:
// a count and the exact sum in each bucket. At finish, each bucket's gaps are
// recorded at their mean, which lies inside the bucket, so the exported
// histogram has exactly the counts and sum of the real gaps while the state
// stays bounded however long the output is. A stream's gaps are steady, so
// the gaps of the latest bucket gather in curN and curSum, beside the other
// fields a token touches, and reach n and sum (two more cache lines) only
// when the bucket changes or at flush. The zero value holds no gaps.
type itlHist struct {
	curN   uint32
	last   uint8 // 1 + the bucket of curN and curSum; 0 before the first gap
	min    int64 // the smallest gap, once there is one
	max    int64
	curSum int64
	n      [nITL]uint32
	sum    [nITL]int64
}

// A gap is added, on the per-token paths, as
//
//	if h.fits(gap) {
//		h.count(gap)
//	} else {
//		h.move(gap)
//	}
//
// written out at each call: a method holding the call to move is too
// costly for the inliner, and out of line it makes its caller save every
// live value around it on every token, not only on the rare move.

// fits reports whether gap is in the latest bucket.
func (h *itlHist) fits(gap int64) bool {
	b := &itlRanges[h.last&uint8(len(itlRanges)-1)]
	return gap > b.lo && gap <= b.hi
}

// count adds a gap of the latest bucket.
func (h *itlHist) count(gap int64) {
	h.min = min(h.min, gap)
	h.max = max(h.max, gap)
	h.curN++
	h.curSum += gap
}

// move adds a gap outside the latest bucket, which it makes the latest.
//
//go:noinline
func (h *itlHist) move(gap int64) {
	if h.last == 0 {
		h.min = gap // the first
	}
	h.flush()
	h.last = uint8(itlBucket(gap)) + 1
	h.count(gap)
}

// flush moves the latest bucket's gaps into n and sum; whoever reads n and
// sum calls it first.
func (h *itlHist) flush() {
	if h.last == 0 {
		return
	}
	h.n[h.last-1] += h.curN
	h.sum[h.last-1] += h.curSum
	h.curN, h.curSum = 0, 0
}

// smallest is the smallest gap; valid when any was added.
func (h *itlHist) smallest() int64 { return h.min }

// empty reports whether no gap was added.
func (h *itlHist) empty() bool { return h.last == 0 }

// itlBucket is the bucket of gap: the first bound at or above it.
func itlBucket(gap int64) int {
	for i, b := range itlBoundsNs {
		if gap <= b {
			return i
		}
	}
	return nITL - 1
}

type sideState struct {
	last Kind
	time int64
}

type run struct {
	start, end int64 // end: PREEMPTED time, 0 while running or last
	feFirst    int64
	// A decode token touches enFirst and enTokens: side by side, they
	// share a cache line wherever the run lies.
	// Token sums are 64-bit: a step's count is bounded, a run's number of
	// steps is not, and a sum past 2^31 must not wrap negative.
	enFirst          int64
	enTokens         int64
	feTokens         int64
	computed, cached int32
	chunks           int32
	// Speculative decoding in this run's decode segment (SPEC §8).
	draft, accepted int64
	specSteps       int32
	events          []chunkEvent
}

type chunkEvent struct {
	time     int64
	computed int32
}

// reqExtra holds what most requests do not need, so reqState stays small.
type reqExtra struct {
	sampling *SamplingParams
	adapter  string // SPEC §9, from ARRIVED: few requests name one
	parent   trace.SpanContext
	link     trace.SpanContext // Arrival.Link
	feITLs   []time.Duration
	enITLs   []time.Duration
	steps    []stepRec  // DetailSteps and up: engine decode steps
	pending  []delivery // frontend deliveries whose run may not be known yet
	kv       *kvState   // a decode instance's KV transfer (SPEC §7)
	route    pdRoute    // a router's P/D timings (Request.RoutedPD)
	enc      *encState  // multimodal encoder runs (SPEC §9)
	// positions counts accepted draft tokens by position (SPEC §8).
	positions  *[attributes.SpecPositions]int64
	deliveries []int64 // DetailTokens: frontend token deliveries
	// Captured content (ContentCapture only): the input already written
	// (redacted and capped); the output redacted, written at the end, when
	// the finish reasons its messages may lack are known.
	input    string
	output   []Message
	attrs    []attribute.KeyValue // Request.SetAttributes
	onFinish func(*RequestStats)  // Arrival.OnFinish
	// finishReasons are the frontend FINISHED's per-choice reasons
	// (Update.FinishReasons), capped.
	finishReasons []string
}

type stepRec struct {
	time  int64
	index int64
	batch int32
	// run is the run the step decoded in: a run preempted and resumed at
	// the instant of its last step shares that time with the next run.
	run int32
}

// reqState is one in-flight request. Its own mutex guards it, so the engine
// and a frontend meet only when they touch the same request at the same
// instant; the shard's mutex guards only the shard's maps and next. done is
// set once, under mu, by whoever ends the request; from then on only the
// goroutine that set it (finalize) reads the state.
type reqState struct {
	// What every token touches comes first, so a decode or a delivery
	// reads and writes three or four cache lines of the state, not eight.
	// The handle beside mu: a Step by handle reads it, then locks mu, one
	// cache line. mu first: the lock's address is the state's own.
	mu     sync.Mutex
	done   atomic.Bool
	detail Detail
	h      Request // the handle Arrive returns: one allocation per request

	// fe.time and en.time are each side's latest update's own time; the
	// later of the two is the request's (lastSeen).
	fe, en             sideState
	touched            int64 // when the latest update came, in now()'s terms: the TTL counts from it
	feTokens, enTokens int64
	feDeliv, enDeliv   int32
	feFirst, feLast    int64
	enFirst, enLast    int64
	// genCredit are frontend tokens already counted as generation
	// throughput before any engine update reached us; the engine's
	// DECODINGs for the same tokens are not counted again.
	genCredit  int64
	feReported bool // the frontend sent more than ARRIVED
	feBehind   bool // engine updates came before ARRIVED: the frontend's stream runs behind
	trusted    bool // the parent's sampled flag decides
	// headDropped: the head sampler dropped the trace at arrival (fixed
	// then, so spanContextOf reads it without the lock).
	headDropped bool
	// parentFlags are the parent's trace flags but sampled (the W3C
	// random flag goes on down the trace), fixed at arrival.
	parentFlags trace.TraceFlags
	// hasParent: the request arrived with a parent, kept in extra (set
	// then and never after), so spanContextOf reads its tracestate
	// without the lock.
	hasParent bool
	pdRole    pdRole // SPEC §7, from ARRIVED or WithPDRole
	// pending says extra.pending holds deliveries: the per-token path
	// reads this byte, not the extra pointer's cache line.
	pending bool
	runs    []run

	detokFirst, detokLast, detokBusy int64
	detokCount                       int32
	feOneShot                        int32 // output tokens of a response in one piece (FINISHED's NumOutputTokens)
	// feCached is 1 + the cached prompt tokens the response's usage
	// reported (Request.CachedTokens), 0 when it reported none.
	feCached int32

	// itl aggregates the gaps of the stream that gives token times: the
	// engine's until the frontend delivers its first token, then the
	// frontend's (one histogram, not one per side, keeps the state small).
	itl itlHist

	runsBuf [2]run

	sh *shard

	next *reqState // requests sharing the id; guarded by sh.mu
	// succ is the request that reused this one's id, scope and model while
	// this one, finished on the frontend, waits for its engine's updates
	// (reuse); guarded by sh.mu. lookup picks between the two (claims).
	succ *reqState

	id, scope, model, operation string
	traceID                     [16]byte
	spanID                      [8]byte
	extra                       *reqExtra

	arrived, inputProcessed, firstQueued, firstPrefill int64
	feFinish, enFinish                                 int64
	waitUntil                                          int64

	feReason, enReason, errorType string

	prompt          int32 // -1 unknown
	cached          int32 // -1 never scheduled
	recomputeCached int64
	preemptedNs     int64
	preemptions     int32
	preRunFE        int64
}

// lastSeen is the latest update's own time: each side's times never go
// back (admit), so it is the later side's.
// adapter is the LoRA adapter ARRIVED named, or "".
func (r *reqState) adapter() string {
	if r.extra == nil {
		return ""
	}
	return r.extra.adapter
}

func (r *reqState) lastSeen() int64 { return max(r.fe.time, r.en.time) }

// pdRole is a request's part in disaggregated serving: one of the closed
// set ARRIVED's PDRole may name, kept in a byte of the hot state.
type pdRole uint8

const (
	pdNone pdRole = iota
	pdPrefill
	pdDecode
)

func parsePDRole(s string) pdRole {
	switch s {
	case PDRolePrefill:
		return pdPrefill
	case PDRoleDecode:
		return pdDecode
	}
	return pdNone
}

func (p pdRole) String() string {
	switch p {
	case pdPrefill:
		return PDRolePrefill
	case pdDecode:
		return PDRoleDecode
	}
	return ""
}

// sideFinished reports whether side has reported FINISHED for r. Called
// with r.mu held.
func (r *reqState) sideFinished(side Side) bool {
	if side == SideEngine {
		return r.en.last == KindFinished
	}
	return r.fe.last == KindFinished
}

func (r *reqState) matches(scope, model string) bool {
	return (scope == "" || scope == r.scope) && (model == "" || model == r.model)
}

func (r *reqState) curRun() *run {
	if len(r.runs) == 0 {
		return nil
	}
	return &r.runs[len(r.runs)-1]
}

// runAt is the last run started at or before ns, for frontend deliveries
// whose engine updates may have come in a different order.
func (r *reqState) runAt(ns int64) *run {
	for i := len(r.runs) - 1; i >= 0; i-- {
		if r.runs[i].start <= ns {
			return &r.runs[i]
		}
	}
	return nil
}

func (r *reqState) ext() *reqExtra {
	if r.extra == nil {
		r.extra = &reqExtra{}
	}
	return r.extra
}
