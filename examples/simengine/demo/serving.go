package demo

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/llmtrace/llmtrace/examples/simengine/internal/workload"
	"github.com/llmtrace/llmtrace/examples/simengine/sim"
	"github.com/llmtrace/llmtrace/internal/summary"
	"github.com/llmtrace/llmtrace/otelstats"
)

// The serving features of SPEC §7–9 in the demo: what the options turn on,
// and the summary of what llmtrace derived for them.

// applyFeatures turns the options' serving features into the workload's
// adapters and images and the engine's speculative decoding.
func applyFeatures(o *Options, w *workload.Workload, cfg *sim.Config) ([]workload.Share, error) {
	if o.PD && o.Sampling != "" {
		// Each tracker decides at its own request's end; a P/D trace
		// spans three, so per-tracker policies would keep parts of
		// traces. Tail-sample whole traces in a collector instead.
		return nil, errors.New("-sampling cannot be used with -pd: each of the three trackers would keep or drop its own part of a trace; sample whole traces in a collector (tail_sampling) instead")
	}
	mix, err := workload.ParseAdapterMix(o.Adapters)
	if err != nil {
		return nil, err
	}
	w.AssignAdapters(mix, o.Seed)
	if err := w.AssignImages(o.Multimodal, o.MaxImages, o.Seed); err != nil {
		return nil, err
	}
	cfg.Spec.K = 0
	if o.SpecDecode {
		acc, err := workload.ParseAcceptance(o.SpecAccept)
		if err != nil {
			return nil, err
		}
		if o.SpecK < 1 || o.SpecK > sim.MaxDraftTokens {
			return nil, fmt.Errorf("draft length %d must be in [1, %d]", o.SpecK, sim.MaxDraftTokens)
		}
		cfg.Spec = sim.Spec{K: o.SpecK, Accept: acc}
	}
	return mix, nil
}

// servingStats gathers SPEC §7–9's values from the trackers' RequestStats.
type servingStats struct {
	// P/D: each instance's own view, the router's two timings, the
	// transfers.
	prefill, decode           summary.Collector
	pdPrefill, pdDecodeTTFT   []float64
	kvTime, kvGBps            []float64
	transfers, kvFailed       int
	kvBytes, kvTokens         int64
	draft, accepted, steps    int64
	specReqs                  int
	adapters                  map[string]*adapterStats
	encode                    []float64
	encoderRuns, imageRequest int
}

type adapterStats struct {
	n         int
	ttft, e2e []float64
}

// addClient takes the client's view of a request (the engine's, or the
// router's in P/D).
func (v *servingStats) addClient(s *otelstats.RequestStats) {
	add := func(dst *[]float64, l otelstats.Latency) {
		if l.Valid {
			*dst = append(*dst, l.Value.Seconds())
		}
	}
	add(&v.pdPrefill, s.PDPrefillDuration)
	add(&v.pdDecodeTTFT, s.PDDecodeTTFT)
	if v.adapters == nil {
		v.adapters = map[string]*adapterStats{}
	}
	a := v.adapters[s.LoRAAdapter]
	if a == nil {
		a = &adapterStats{}
		v.adapters[s.LoRAAdapter] = a
	}
	a.n++
	add(&a.ttft, s.FirstTokenLatency)
	add(&a.e2e, s.E2ELatency)
}

// addEngine takes an engine's view of a request: the unified engine's, or
// a P/D instance's.
func (v *servingStats) addEngine(s *otelstats.RequestStats) {
	if s.PDRole != "" {
		// The instance tables use TTFT and queue; the client's table
		// has the ITLs already.
		cp := *s
		cp.OutputTokenLatencies = nil
		if s.PDRole == otelstats.PDRolePrefill {
			v.prefill.Add(&cp)
		} else {
			v.decode.Add(&cp)
		}
	}
	if s.KVSource != "" {
		v.transfers++
		v.kvBytes += s.KVTransferBytes
		v.kvTokens += int64(s.NumRemoteTokens)
		if s.KVTransferFailed {
			v.kvFailed++
		}
		if d := s.KVTransferDuration; d.Valid {
			v.kvTime = append(v.kvTime, d.Value.Seconds())
			if !s.KVTransferFailed && d.Value > 0 {
				v.kvGBps = append(v.kvGBps, float64(s.KVTransferBytes)/d.Value.Seconds()/1e9)
			}
		}
	}
	if s.NumSpecSteps > 0 {
		v.specReqs++
		v.draft += int64(s.NumDraftTokens)
		v.accepted += int64(s.NumAcceptedTokens)
		v.steps += int64(s.NumSpecSteps)
	}
	if s.NumEncoderRuns > 0 {
		v.encoderRuns += s.NumEncoderRuns
		v.imageRequest++
		v.encode = append(v.encode, s.EncodeDuration.Value.Seconds())
	}
}

// statRow is one line of a percentile table.
func statRow(w io.Writer, name string, xs []float64, format func(float64) string) {
	if len(xs) == 0 {
		fmt.Fprintf(w, "  %-34s %8d %10s %10s %10s %10s\n", name, 0, "-", "-", "-", "-")
		return
	}
	p50, _ := summary.Percentile(xs, 50)
	p90, _ := summary.Percentile(xs, 90)
	p99, _ := summary.Percentile(xs, 99)
	fmt.Fprintf(w, "  %-34s %8d %10s %10s %10s %10s\n", name, len(xs), format(p50), format(p90), format(p99), format(xs[len(xs)-1]))
}

func secs(s float64) string { return fmtDur(time.Duration(s * 1e9)) }

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

// writeServing prints what the serving features did, as llmtrace derived
// it (and, for the acceptance per draft position and the encoder runs'
// placement, as the simulator counted it).
func (v *servingStats) write(w io.Writer, o *Options, cfg *sim.Config, res *sim.Result, mix []workload.Share) {
	header := func(s string) { fmt.Fprintf(w, "\n%s\n", s) }
	if o.PD {
		header(fmt.Sprintf("P/D: router → %s → %s over a %g Gb/s link; %d KV transfers, %d failed (recomputed on %s), %.2f GB of %d tokens",
			cfg.PD.Prefill, cfg.PD.Decode, cfg.PD.LinkGbps, v.transfers, v.kvFailed, cfg.PD.Decode, float64(v.kvBytes)/1e9, v.kvTokens))
		fmt.Fprintf(w, "  (the table above is the client's view, at the router; queueing and prefill happen on the instances)\n")
		fmt.Fprintf(w, "  %-34s %8s %10s %10s %10s %10s\n", "stage", "count", "p50", "p90", "p99", "max")
		statRow(w, "router: send to P → P's response", v.pdPrefill, secs)
		statRow(w, "router: send to D → first token", v.pdDecodeTTFT, secs)
		statRow(w, "P: TTFT (its own arrival)", v.prefill.TTFT, secs)
		statRow(w, "P: queue", v.prefill.Queue, secs)
		statRow(w, "D: TTFT (its own arrival)", v.decode.TTFT, secs)
		statRow(w, "D: queue (the waits around it)", v.decode.Queue, secs)
		statRow(w, "D: KV transfer", v.kvTime, secs)
		statRow(w, "D: transfer throughput (GB/s)", v.kvGBps, func(x float64) string { return fmt.Sprintf("%.2f", x) })
		fmt.Fprintf(w, "  preemptions: %d on %s, %d on %s\n", v.prefill.Preemptions, cfg.PD.Prefill, v.decode.Preemptions, cfg.PD.Decode)
	}
	if o.SpecDecode {
		header(fmt.Sprintf("speculative decoding: k=%d, acceptance model %s", cfg.Spec.K, o.SpecAccept))
		if v.draft > 0 {
			fmt.Fprintf(w, "  %d of %d draft tokens accepted (acceptance rate %.1f%%), mean acceptance length %.2f over %d steps of %d requests\n",
				v.accepted, v.draft, 100*float64(v.accepted)/float64(v.draft), 1+float64(v.accepted)/float64(v.steps), v.steps, v.specReqs)
		}
		var pos []string
		for i := 0; i < cfg.Spec.K && res.Spec.Drafted[i] > 0; i++ {
			pos = append(pos, fmt.Sprintf("%d: %.1f%%", i, 100*float64(res.Spec.Accepted[i])/float64(res.Spec.Drafted[i])))
		}
		if len(pos) > 0 {
			fmt.Fprintf(w, "  accepted per draft position (simulator): %s\n", strings.Join(pos, ", "))
		}
	}
	if len(mix) > 0 {
		header(fmt.Sprintf("LoRA adapters (at most %d in a batch):", cfg.MaxLoRAs))
		names := make([]string, 0, len(v.adapters))
		for a := range v.adapters {
			names = append(names, a)
		}
		sort.Strings(names)
		for _, a := range names {
			s := v.adapters[a]
			label := a
			if a == "" {
				label = "(base model)"
			}
			p50t, _ := summary.Percentile(s.ttft, 50)
			p99t, _ := summary.Percentile(s.ttft, 99)
			p50e, _ := summary.Percentile(s.e2e, 50)
			fmt.Fprintf(w, "  %-14s %6d requests  TTFT p50 %s p99 %s  e2e p50 %s\n", label, s.n, secs(p50t), secs(p99t), secs(p50e))
		}
	}
	if o.Multimodal > 0 {
		var before, during, hits, images int
		for _, rs := range [][]sim.Truth{res.Requests, res.Prefill, res.Decode} {
			for i := range rs {
				before += rs[i].EncodeBefore
				during += rs[i].EncodeDuring
				hits += rs[i].EncoderHits
			}
		}
		first := res.Requests
		if o.PD {
			first = res.Prefill
		}
		for i := range first {
			images += first[i].Images
		}
		header(fmt.Sprintf("multimodal: %d images of %d tokens; %d encoder runs in %d requests", images, cfg.Multimodal.TokensPerImage, v.encoderRuns, v.imageRequest))
		fmt.Fprintf(w, "  runs before prefill %d, during prefill %d, encoder-cache hits %d (simulator)\n", before, during, hits)
		fmt.Fprintf(w, "  %-34s %8s %10s %10s %10s %10s\n", "", "count", "p50", "p90", "p99", "max")
		statRow(w, "encode time per request", v.encode, secs)
	}
}
