package llmtraceprocessor

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.uber.org/goleak"

	"github.com/llmtrace/llmtrace/attributes"
	"github.com/llmtrace/llmtrace/otelcol/internal/spantest"
	"github.com/llmtrace/llmtrace/reconstruct"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func run(t *testing.T, cfg *Config, td ptrace.Traces) ptrace.Traces {
	t.Helper()
	sink := new(consumertest.TracesSink)
	p, err := NewFactory().CreateTraces(context.Background(), processortest.NewNopSettings(Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if err := p.ConsumeTraces(context.Background(), td); err != nil {
		t.Fatal(err)
	}
	if len(sink.AllTraces()) != 1 {
		t.Fatalf("got %d batches", len(sink.AllTraces()))
	}
	return sink.AllTraces()[0]
}

type got struct {
	name       string
	start, end time.Duration
	parent     pcommon.SpanID
	trace      pcommon.TraceID
	scope      string
}

func collect(td ptrace.Traces) (children []got, others map[string]ptrace.Span) {
	others = map[string]ptrace.Span{}
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		sss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			for k := 0; k < ss.Spans().Len(); k++ {
				sp := ss.Spans().At(k)
				if v, ok := sp.Attributes().Get(string(attributes.Reconstructed)); ok && v.Bool() {
					children = append(children, got{sp.Name(), sp.StartTimestamp().AsTime().Sub(t0), sp.EndTimestamp().AsTime().Sub(t0),
						sp.ParentSpanID(), sp.TraceID(), ss.Scope().Name()})
					continue
				}
				others[sp.Name()] = sp
			}
		}
	}
	return children, others
}

func TestProcessorExpandsVLLMSpans(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "vllm-a")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vllm.llm_engine")
	tid, sid := pcommon.TraceID{1, 2, 3}, pcommon.SpanID{4, 5, 6}
	spantest.VLLM(ss, tid, sid, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
	router := ss.Spans().AppendEmpty()
	router.SetName("route")
	router.SetTraceID(tid)
	router.SetSpanID(pcommon.SpanID{9})
	router.Attributes().PutStr("k", "v")

	out := run(t, createDefaultConfig().(*Config), td)
	children, others := collect(out)
	want := []got{
		{attributes.SpanInputProcessing, 0, 50 * time.Millisecond, sid, tid, reconstruct.ScopeName},
		{attributes.SpanQueue, 50 * time.Millisecond, 100 * time.Millisecond, sid, tid, reconstruct.ScopeName},
		{attributes.SpanPrefill, 100 * time.Millisecond, 300 * time.Millisecond, sid, tid, reconstruct.ScopeName},
		{attributes.SpanDecode, 300 * time.Millisecond, 900 * time.Millisecond, sid, tid, reconstruct.ScopeName},
	}
	if len(children) != len(want) {
		t.Fatalf("children = %+v", children)
	}
	for i := range want {
		if children[i] != want[i] {
			t.Errorf("child %d = %+v, want %+v", i, children[i], want[i])
		}
	}
	eng := others["llm_request"]
	if v, _ := eng.Attributes().Get(string(attributes.ReconstructEngine)); v.Str() != "vllm" {
		t.Errorf("engine span has llm.reconstruct.engine=%q", v.Str())
	}
	if _, ok := eng.Attributes().Get(string(attributes.ReconstructClamped)); ok {
		t.Error("a consistent span was marked clamped")
	}
	r := others["route"]
	if r.Attributes().Len() != 1 {
		t.Errorf("the router span was changed: %v", r.Attributes().AsRaw())
	}
	if n := out.SpanCount(); n != 6 {
		t.Errorf("span count %d, want 6", n)
	}

	// Feeding the output again adds nothing: expanded spans are marked.
	again := run(t, createDefaultConfig().(*Config), out)
	if again.SpanCount() != 6 {
		t.Errorf("a second pass gave %d spans, want 6", again.SpanCount())
	}
}

func TestProcessorCountsContradictions(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	// The engine-core clock says 0.9 s of queue and prefill before a
	// first token the frontend saw at 0.3 s.
	sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.5, 0.4, 0.6, 10, 5, "stop")
	_ = sp
	out := run(t, createDefaultConfig().(*Config), td)
	children, others := collect(out)
	v, ok := others["llm_request"].Attributes().Get(string(attributes.ReconstructClamped))
	if !ok || v.Int() != 2 { // prefill and queue both reach before ARRIVED
		t.Errorf("llm.reconstruct.clamped = %v, %v; want 2", v.AsRaw(), ok)
	}
	for _, c := range children {
		if c.end < c.start || c.start < 0 {
			t.Errorf("child %+v is negative or before the span", c)
		}
	}
}

func TestProcessorLeavesOtherSpansAlone(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	ss.Scope().SetName("github.com/llmtrace/llmtrace/otelstats")
	root := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	root.SetName("chat m") // llmtrace's own root: has its children already
	plain := ss.Spans().AppendEmpty()
	plain.SetName("GET /health")
	before := td.SpanCount()
	cp := ptrace.NewTraces()
	td.CopyTo(cp)
	out := run(t, createDefaultConfig().(*Config), td)
	if out.SpanCount() != before {
		t.Fatalf("span count %d, want %d", out.SpanCount(), before)
	}
	if _, ok := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().Get(string(attributes.ReconstructEngine)); ok {
		t.Error("llmtrace's own root was marked expanded")
	}
}

func TestConfigValidate(t *testing.T) {
	for name, ok := range map[string]bool{"": true, "auto": true, "vllm": true, "vllm-v0": true, "sglang": true, "tensorrt-llm": true, "llama.cpp": false,
		"llmtrace": false} { // llmtrace's mapping is for its own roots, never forced: it would expand nothing
		err := (&Config{Engine: name}).Validate()
		if (err == nil) != ok {
			t.Errorf("Validate(%q) = %v", name, err)
		}
	}
	// A forced engine applies to every span.
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	out := run(t, &Config{Engine: "vllm-v0"}, td)
	children, _ := collect(out)
	if len(children) != 3 || children[0].name != attributes.SpanQueue || children[0].end != 50*time.Millisecond {
		t.Errorf("vllm-v0 mapping gave %+v, want queue 0→50ms first", children)
	}
}

// A span whose tree is its root alone (vLLM's request aborted before it was
// scheduled: no first token, no queue) is annotated but adds no scope: an
// empty reconstruct scope would be payload on every such request.
func TestProcessorNoEmptyScope(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0, 0.2, -5000.25, 0, 0, 50, 0, "abort")
	out := run(t, createDefaultConfig().(*Config), td)
	sss := out.ResourceSpans().At(0).ScopeSpans()
	for i := 0; i < sss.Len(); i++ {
		if sss.At(i).Spans().Len() == 0 {
			t.Errorf("scope %q with no spans", sss.At(i).Scope().Name())
		}
	}
}

// A forced engine applies to engine spans, not to llmtrace's own roots,
// which have their children already: expanding them would duplicate every
// phase of the request.
func TestProcessorForcedEngineLeavesLLMTraceRoots(t *testing.T) {
	for _, engine := range []string{"vllm", "vllm-v0", "sglang", "tensorrt-llm"} {
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		ss.Scope().SetName("github.com/llmtrace/llmtrace/otelstats")
		root := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
		root.SetName("chat m")
		out := run(t, &Config{Engine: engine}, td)
		if out.SpanCount() != 1 {
			t.Errorf("engine %s: llmtrace's root expanded into %d spans", engine, out.SpanCount())
		}
		if _, ok := out.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().Get(string(attributes.ReconstructEngine)); ok {
			t.Errorf("engine %s: llmtrace's root was marked expanded", engine)
		}
	}
}

// The rebuilt children carry the engine span's W3C trace flags (sampled,
// random), as a tracer's children of it would, with a local parent (OTLP
// flags bit 8 set, bit 9 clear): the engine span's own parent may be
// remote, theirs is not.
func TestProcessorChildrenCarryTraceFlags(t *testing.T) {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	sp := spantest.VLLM(ss, pcommon.TraceID{1}, pcommon.SpanID{2}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 10, 5, "stop")
	sp.SetFlags(0x303) // sampled, random; its parent is remote
	out := run(t, createDefaultConfig().(*Config), td)
	kids := out.ResourceSpans().At(0).ScopeSpans().At(1).Spans()
	if kids.Len() != 4 {
		t.Fatalf("%d children", kids.Len())
	}
	for i := 0; i < kids.Len(); i++ {
		if f := kids.At(i).Flags(); f != 0x103 {
			t.Errorf("%s has flags %#x, want 0x103", kids.At(i).Name(), f)
		}
	}
}

// childIDs maps the name of each rebuilt child of parent to its span id.
func childIDs(t *testing.T, td ptrace.Traces, parent pcommon.SpanID) map[string]pcommon.SpanID {
	t.Helper()
	ids := map[string]pcommon.SpanID{}
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		sss := td.ResourceSpans().At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			sps := sss.At(j).Spans()
			for k := 0; k < sps.Len(); k++ {
				sp := sps.At(k)
				if v, ok := sp.Attributes().Get(string(attributes.Reconstructed)); !ok || !v.Bool() || sp.ParentSpanID() != parent {
					continue
				}
				if sp.SpanID().IsEmpty() || sp.SpanID() == parent {
					t.Errorf("%s has span id %v (its parent %v)", sp.Name(), sp.SpanID(), parent)
				}
				if _, dup := ids[sp.Name()]; dup {
					t.Errorf("two %s children", sp.Name())
				}
				ids[sp.Name()] = sp.SpanID()
			}
		}
	}
	return ids
}

// An engine span delivered twice (an OTLP exporter retrying a send that
// arrived, a queue re-sending) is expanded into the same children both
// times, whichever processor instance sees it: their ids are derived from
// the engine span's trace and span ids, so backends keep one copy of each
// phase instead of showing every phase twice.
func TestProcessorRedeliveryGivesSameChildren(t *testing.T) {
	tid, sid := pcommon.TraceID{7, 7, 7}, pcommon.SpanID{8, 8, 8}
	delivery := func() ptrace.Traces {
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vllm.llm_engine")
		spantest.VLLM(ss, tid, sid, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
		// Another engine span of the same trace gets children of its own.
		spantest.VLLM(ss, tid, pcommon.SpanID{9, 9, 9}, t0, 0.3, 1.0, 0.05, 0.2, 0.6, 100, 11, "stop")
		return td
	}
	first := run(t, createDefaultConfig().(*Config), delivery())
	second := run(t, createDefaultConfig().(*Config), delivery())
	a, b := childIDs(t, first, sid), childIDs(t, second, sid)
	if len(a) != 4 {
		t.Fatalf("%d children, want 4", len(a))
	}
	for name, id := range a {
		if b[name] != id {
			t.Errorf("%s: span id %v on the first delivery, %v on the second", name, id, b[name])
		}
	}
	seen := map[pcommon.SpanID]bool{}
	kids := first.ResourceSpans().At(0).ScopeSpans().At(1).Spans()
	if kids.Len() != 8 {
		t.Fatalf("%d children of two engine spans, want 8", kids.Len())
	}
	for i := 0; i < kids.Len(); i++ {
		id := kids.At(i).SpanID()
		if seen[id] {
			t.Errorf("span id %v used twice in one trace", id)
		}
		seen[id] = true
	}
}
