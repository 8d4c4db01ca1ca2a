package simengine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/e2e/testbackend"
	"github.com/llmtrace/llmtrace/examples/simengine/demo"
	"github.com/llmtrace/llmtrace/otelstats"
)

// The serving modes (SPEC §7–9) end to end: the demo exports over OTLP
// gRPC to a real Jaeger, and every client request is read back through
// Jaeger's query API as one whole trace with the shape the SPEC gives.

// servingRun runs the demo exporting to j and returns every tracker's
// RequestStats by role ("" for the unified engine or the router) and the
// span ids the SDK ended, by trace.
func servingRun(t *testing.T, j *testbackend.Jaeger, o demo.Options, service string) (map[string][]otelstats.RequestStats, *exportedSpans) {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.OTLPGRPCEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "65536")
	t.Setenv("LLMTRACE_SAMPLING", "")
	t.Setenv("LLMTRACE_DETAIL", "")
	exp := &exportedSpans{traces: map[string][]string{}}
	var mu sync.Mutex
	byRole := map[string][]otelstats.RequestStats{}
	o.SpanProcessors = append(o.SpanProcessors, exp)
	o.OnFinish = func(s *otelstats.RequestStats) {
		mu.Lock()
		c := *s
		c.OutputTokenLatencies = nil
		byRole[s.PDRole] = append(byRole[s.PDRole], c)
		mu.Unlock()
	}
	rep, err := demo.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.TracesExported || rep.Result.Rejections != 0 {
		t.Fatalf("traces exported %v, %d rejected updates", rep.TracesExported, rep.Result.Rejections)
	}
	return byRole, exp
}

// wholeTrace waits for trace id in Jaeger and checks it holds exactly the
// spans the SDK ended for it.
func wholeTrace(ctx context.Context, t *testing.T, j *testbackend.Jaeger, exp *exportedSpans, id string) *testbackend.Trace {
	t.Helper()
	want := slices.Clone(exp.traces[id])
	if len(want) == 0 {
		t.Fatalf("the SDK ended no span of trace %s", id)
	}
	tr, err := j.WaitTrace(ctx, id, len(want))
	if err != nil {
		t.Fatalf("trace %s: %v", id, err)
	}
	var got []string
	for _, sp := range tr.Spans {
		got = append(got, sp.SpanID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("trace %s: Jaeger holds %d spans, the SDK exported %d", id, len(got), len(want))
	}
	undoZeroDurationSanitizer(tr)
	for _, sp := range tr.Spans {
		if w, ok := sp.Attributes[jaegerWarnings]; ok {
			t.Fatalf("trace %s: %s: Jaeger warns %v", id, sp.Name, w)
		}
	}
	return tr
}

// TestJaegerPD runs the P/D mode with every other feature on and checks,
// through Jaeger's API, that each client request is one trace: the
// router's root with P's and D's roots as its children, D's llm.kv_transfer
// between its two queue waits, the router's P/D timings, and the adapter,
// speculative and encoder attributes where they belong.
func TestJaegerPD(t *testing.T) {
	j := testbackend.StartJaeger(t)
	const n = 200
	o := e2eOptions(n)
	allFeatures(&o)
	byRole, exp := servingRun(t, j, o, "simengine-pd")
	router, prefill, decode := byRole[""], index(byRole[otelstats.PDRolePrefill]), index(byRole[otelstats.PDRoleDecode])
	if len(router) != n || len(prefill) != n {
		t.Fatalf("%d router and %d prefill requests finished, want %d", len(router), len(prefill), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	var transfers, failed, encodes, spec, spans int
	for i := range router {
		r := &router[i]
		if seen[r.TraceID] {
			t.Fatalf("%s: trace %s is another request's too", r.RequestID, r.TraceID)
		}
		seen[r.TraceID] = true
		tr := wholeTrace(ctx, t, j, exp, r.TraceID)
		spans += len(tr.Spans)
		p, d := prefill[r.RequestID], decode[r.RequestID]
		got, err := checkPDTrace(tr, r, p, d)
		if err != nil {
			t.Fatalf("%s (trace %s): %v", r.RequestID, r.TraceID, err)
		}
		transfers += got.transfers
		failed += got.failed
		encodes += got.encodes
		spec += got.spec
	}
	t.Logf("%d client requests, each one trace of the three trackers' spans in Jaeger (%d spans in all): %d KV transfers (%d failed), %d encoder runs, %d speculative decode segments",
		len(router), spans, transfers, failed, encodes, spec)
	if transfers == 0 || failed == 0 || encodes == 0 || spec == 0 {
		t.Errorf("the run did not exercise every feature")
	}
}

func index(ss []otelstats.RequestStats) map[string]*otelstats.RequestStats {
	m := map[string]*otelstats.RequestStats{}
	for i := range ss {
		m[ss[i].RequestID] = &ss[i]
	}
	return m
}

type pdCounts struct{ transfers, failed, encodes, spec int }

// checkPDTrace checks one client request's trace as Jaeger stored it.
func checkPDTrace(tr *testbackend.Trace, r, p, d *otelstats.RequestStats) (pdCounts, error) {
	var c pdCounts
	root, ok := tr.Root()
	if !ok || root.SpanID != r.SpanID || root.Kind != testbackend.SpanKindServer {
		return c, fmt.Errorf("the root is %+v, not the router's span %s", root, r.SpanID)
	}
	var roots int
	for _, sp := range tr.Spans {
		if sp.ParentSpanID == "" {
			roots++
		}
	}
	if roots != 1 {
		return c, fmt.Errorf("%d root spans", roots)
	}
	ra := root.Attributes
	if err := wantFloat(ra, attributes.LatencyTimeToFirstToken, r.FirstTokenLatency); err != nil {
		return c, fmt.Errorf("router root: %v", err)
	}
	if err := wantFloat(ra, attributes.PDPrefillDuration, r.PDPrefillDuration); err != nil {
		return c, fmt.Errorf("router root: %v", err)
	}
	if err := wantFloat(ra, attributes.PDDecodeTTFT, r.PDDecodeTTFT); err != nil {
		return c, fmt.Errorf("router root: %v", err)
	}
	if _, has := ra[string(attributes.PDRole)]; has {
		return c, fmt.Errorf("the router's root has %s", attributes.PDRole)
	}
	if r.LoRAAdapter != "" && ra[string(attributes.LoRAAdapter)] != r.LoRAAdapter {
		return c, fmt.Errorf("router root adapter %v, want %s", ra[string(attributes.LoRAAdapter)], r.LoRAAdapter)
	}
	for _, x := range []struct {
		role string
		s    *otelstats.RequestStats
	}{{otelstats.PDRolePrefill, p}, {otelstats.PDRoleDecode, d}} {
		if x.s == nil {
			if x.role == otelstats.PDRoleDecode && !r.PDPrefillDuration.Valid {
				continue // P rejected it; D never saw it
			}
			return c, fmt.Errorf("no %s request", x.role)
		}
		ir, ok := spanByID(tr, x.s.SpanID)
		if !ok || ir.ParentSpanID != root.SpanID || ir.Kind != testbackend.SpanKindServer {
			return c, fmt.Errorf("%s's root %+v is not a SERVER child of the router's root", x.role, ir)
		}
		if ir.Attributes[string(attributes.PDRole)] != x.role {
			return c, fmt.Errorf("%s's root has role %v", x.role, ir.Attributes[string(attributes.PDRole)])
		}
		if ir.StartUnixNano < root.StartUnixNano || ir.EndUnixNano > root.EndUnixNano && r.FinishReason != otelstats.FinishAbort {
			return c, fmt.Errorf("%s's root [%d, %d] is outside the router's [%d, %d]", x.role, ir.StartUnixNano, ir.EndUnixNano, root.StartUnixNano, root.EndUnixNano)
		}
		c.encodes += len(childrenNamed(tr, ir.SpanID, attributes.SpanEncode))
		if len(childrenNamed(tr, ir.SpanID, attributes.SpanEncode)) != x.s.NumEncoderRuns {
			return c, fmt.Errorf("%s: %d llm.encode spans, %d encoder runs", x.role, len(childrenNamed(tr, ir.SpanID, attributes.SpanEncode)), x.s.NumEncoderRuns)
		}
		if x.role == otelstats.PDRoleDecode {
			k, err := checkDecodeSide(tr, ir, x.s)
			if err != nil {
				return c, err
			}
			c.transfers += k.transfers
			c.failed += k.failed
			c.spec += k.spec
		}
	}
	return c, nil
}

// checkDecodeSide checks D's tree: queue (new) → llm.kv_transfer → queue
// (kv_ready) back to back, the transfer's attributes, and the decode
// segments' speculative counts adding up to the request's.
func checkDecodeSide(tr *testbackend.Trace, root testbackend.Span, d *otelstats.RequestStats) (pdCounts, error) {
	var c pdCounts
	kv := childrenNamed(tr, root.SpanID, attributes.SpanKVTransfer)
	if d.KVSource == "" {
		if len(kv) != 0 {
			return c, fmt.Errorf("decode: a transfer span without a transfer")
		}
		return c, nil
	}
	if len(kv) != 1 {
		return c, fmt.Errorf("decode: %d llm.kv_transfer spans", len(kv))
	}
	c.transfers++
	var newQ, readyQ []testbackend.Span
	for _, q := range childrenNamed(tr, root.SpanID, attributes.SpanQueue) {
		switch q.Attributes[string(attributes.QueueReason)] {
		case attributes.QueueReasonNew:
			newQ = append(newQ, q)
		case attributes.QueueReasonKVReady:
			readyQ = append(readyQ, q)
		}
	}
	x := kv[0]
	if len(newQ) != 1 || len(readyQ) != 1 || newQ[0].EndUnixNano != x.StartUnixNano || readyQ[0].StartUnixNano != x.EndUnixNano {
		return c, fmt.Errorf("decode: the transfer [%d, %d] does not sit between the two waits (%d new, %d kv_ready)",
			x.StartUnixNano, x.EndUnixNano, len(newQ), len(readyQ))
	}
	if time.Duration(x.Duration()) != d.KVTransferDuration.Value || x.Attributes[string(attributes.KVTransferSource)] != d.KVSource {
		return c, fmt.Errorf("decode: transfer %v from %v, the request's %v from %s", time.Duration(x.Duration()),
			x.Attributes[string(attributes.KVTransferSource)], d.KVTransferDuration.Value, d.KVSource)
	}
	if d.KVTransferFailed {
		c.failed++
		if x.Status.Code != testbackend.StatusError || x.Attributes[string(attributes.ErrorType)] != attributes.ErrorKVTransferFailed {
			return c, fmt.Errorf("decode: a failed transfer's span has status %+v, error.type %v", x.Status, x.Attributes[string(attributes.ErrorType)])
		}
	} else if x.Attributes[string(attributes.KVTransferTokens)] != int64(d.NumRemoteTokens) || x.Attributes[string(attributes.KVTransferBytes)] != d.KVTransferBytes {
		return c, fmt.Errorf("decode: transfer of %v tokens, %v bytes; the request's %d, %d", x.Attributes[string(attributes.KVTransferTokens)],
			x.Attributes[string(attributes.KVTransferBytes)], d.NumRemoteTokens, d.KVTransferBytes)
	}
	var draft, acc int64
	for _, seg := range childrenNamed(tr, root.SpanID, attributes.SpanDecode) {
		if v, ok := seg.Attributes[string(attributes.SpecDraftTokens)].(int64); ok {
			draft += v
			acc += seg.Attributes[string(attributes.SpecAcceptedTokens)].(int64)
			c.spec++
		}
	}
	if draft != int64(d.NumDraftTokens) || acc != int64(d.NumAcceptedTokens) {
		return c, fmt.Errorf("decode: segments drafted %d and accepted %d, the request %d and %d", draft, acc, d.NumDraftTokens, d.NumAcceptedTokens)
	}
	if d.NumSpecSteps > 0 {
		if got := root.Attributes[string(attributes.SpecAcceptanceRate)]; got != d.SpecAcceptanceRate {
			return c, fmt.Errorf("decode root acceptance rate %v, the request's %v", got, d.SpecAcceptanceRate)
		}
	}
	return c, nil
}

func spanByID(tr *testbackend.Trace, id string) (testbackend.Span, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == id {
			return s, true
		}
	}
	return testbackend.Span{}, false
}

func childrenNamed(tr *testbackend.Trace, parent, name string) []testbackend.Span {
	var out []testbackend.Span
	for _, s := range tr.Children(parent) {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func wantFloat(a map[string]any, k attribute.Key, l otelstats.Latency) error {
	v, ok := a[string(k)]
	if !l.Valid {
		if ok {
			return fmt.Errorf("%s = %v on a request without it", k, v)
		}
		return nil
	}
	f, _ := v.(float64)
	if !ok || math.Abs(f-l.Value.Seconds()) > 1e-12 {
		return fmt.Errorf("%s = %v, want %v", k, v, l.Value.Seconds())
	}
	return nil
}

// TestJaegerServingUnified runs one engine with speculative decoding,
// adapters and images and checks every trace in Jaeger: SPEC §3's shape
// (checkTrace), plus the speculative counts, the adapter and one
// llm.encode per encoder run.
func TestJaegerServingUnified(t *testing.T) {
	j := testbackend.StartJaeger(t)
	const n = 200
	o := e2eOptions(n)
	o.SpecDecode = true
	o.Adapters = "sql-lora=0.4,chat-lora=0.3"
	o.Multimodal = 0.4
	byRole, exp := servingRun(t, j, o, "simengine-serving")
	stats := byRole[""]
	if len(stats) != n {
		t.Fatalf("%d requests finished, want %d", len(stats), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var encodes, spec, adapters int
	for i := range stats {
		s := &stats[i]
		tr := wholeTrace(ctx, t, j, exp, s.TraceID)
		if _, err := checkTrace(tr, s, o.Engine.Model); err != nil {
			t.Fatalf("%s: %v", s.RequestID, err)
		}
		root, _ := tr.Root()
		if got := len(tr.SpansNamed(attributes.SpanEncode)); got != s.NumEncoderRuns {
			t.Fatalf("%s: %d llm.encode spans, %d encoder runs", s.RequestID, got, s.NumEncoderRuns)
		}
		encodes += s.NumEncoderRuns
		if s.NumSpecSteps > 0 {
			spec++
			if root.Attributes[string(attributes.SpecDraftTokens)] != int64(s.NumDraftTokens) ||
				root.Attributes[string(attributes.SpecMeanAcceptanceLength)] != s.SpecMeanAcceptanceLength {
				t.Fatalf("%s: root speculative attributes %v / %v, the request's %d / %v", s.RequestID,
					root.Attributes[string(attributes.SpecDraftTokens)], root.Attributes[string(attributes.SpecMeanAcceptanceLength)],
					s.NumDraftTokens, s.SpecMeanAcceptanceLength)
			}
		}
		if s.LoRAAdapter != "" {
			adapters++
			if root.Attributes[string(attributes.LoRAAdapter)] != s.LoRAAdapter {
				t.Fatalf("%s: root adapter %v, want %s", s.RequestID, root.Attributes[string(attributes.LoRAAdapter)], s.LoRAAdapter)
			}
		}
	}
	t.Logf("%d traces checked: %d encoder runs, %d speculative requests, %d with an adapter", len(stats), encodes, spec, adapters)
	if encodes == 0 || spec == 0 || adapters == 0 {
		t.Errorf("the run did not exercise every feature")
	}
}
