package openaihttp

import (
	"context"
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmtrace/llmtrace/otelstats"
	"github.com/llmtrace/llmtrace/spans"
)

// TestProxySpanPathsAgree: the proxy's spans handed to a span processor
// (WithSpanProcessor) are the spans the Tracer makes — names, kinds, ids,
// parent, times, attributes, events, status, scope and resource — for
// every shape of request the proxy emits.
func TestProxySpanPathsAgree(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "parity"))
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name  string
		shape func(c *call)
	}{
		{"stream", func(c *call) {
			c.sent, c.respAt, c.bodyEnd, c.upStatus, c.upProto = at(1), at(5), at(90), 200, "1.1"
			c.ex.status, c.ex.mode, c.ex.firstWrite, c.ex.firstContent, c.ex.lastContent, c.ex.lastWrite = 200, modeSSE, at(6), at(20), at(80), at(91)
			c.ex.events, c.ex.chunks, c.ex.obs.cached = 19, 16, 8
			for i := range 8 {
				c.stall.gap(time.Duration(1+4*(i/7)*i)*time.Millisecond, at(20+i), i+1)
			}
		}},
		{"stream cut by an upstream error", func(c *call) {
			c.sent, c.respAt, c.upStatus, c.upProto, c.bodyErr = at(1), at(5), 200, "1.1", true
			c.ex.status, c.ex.mode, c.ex.firstContent, c.ex.lastContent, c.ex.lastWrite = 200, modeSSE, at(20), at(30), at(30)
			c.ex.events, c.ex.chunks = 4, 3
		}},
		{"one piece", func(c *call) {
			c.sent, c.respAt, c.bodyEnd, c.upStatus, c.upProto = at(1), at(40), at(41), 200, "1.1"
			c.ex.status, c.ex.mode, c.ex.firstWrite, c.ex.lastWrite = 200, modeJSON, at(42), at(42)
		}},
		{"upstream status 500", func(c *call) {
			c.sent, c.respAt, c.upStatus, c.upProto = at(1), at(3), 500, "1.1"
			c.ex.status, c.ex.mode, c.ex.firstWrite = 500, modeJSON, at(4)
		}},
		{"upstream down", func(c *call) {
			c.sent, c.upErr, c.upErrAt = at(1), ErrorConnectionRefused, at(2)
			c.ex.status = http.StatusBadGateway
		}},
		{"never sent", func(c *call) { c.ex.parsedAt = at(2) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			viaTracer := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(viaTracer), sdktrace.WithResource(res),
				sdktrace.WithIDGenerator(spans.IDGenerator()))
			handed := tracetest.NewSpanRecorder()
			var got [2][]sdktrace.ReadOnlySpan
			for i, opts := range [][]Option{
				{WithTracerProvider(tp)},
				{WithTracerProvider(tracenoop.NewTracerProvider()), WithSpanProcessor(handed), WithResource(res)},
			} {
				c := parityCall(t, append(opts, WithMeterProvider(metricnoop.NewMeterProvider()),
					WithStallPolicy(StallPolicy{Factor: 2, Min: time.Millisecond, MinGaps: 2})), t0)
				tc.shape(c)
				c.ex.end = at(100)
				c.emit(false)
				got[i] = []*tracetest.SpanRecorder{viaTracer, handed}[i].Ended()
				if len(got[i]) == 0 {
					t.Fatal("no spans")
				}
				for _, s := range got[i] {
					if s.Parent().SpanID() != c.ex.q.SpanContext().SpanID() || s.SpanContext().TraceID() != c.traceID {
						t.Errorf("%s: parent %v trace %v", s.Name(), s.Parent(), s.SpanContext().TraceID())
					}
					if s.Name() == "POST" && s.SpanContext().SpanID() != c.clientSpan {
						t.Errorf("POST's id %v, the upstream was told %v", s.SpanContext().SpanID(), c.clientSpan)
					}
				}
			}
			a, b := views(got[0]), views(got[1])
			if !reflect.DeepEqual(a, b) {
				t.Errorf("through the Tracer:\n%+v\nhanded to the processor:\n%+v", a, b)
			}
			if tc.name == "stream" && (len(a) != 3 || len(a[1].Events) == 0) {
				t.Errorf("the stream case has no stall event: %+v", a)
			}
		})
	}
}

// parityCall is a traced call as the proxy makes one, arrived at t0.
func parityCall(t *testing.T, opts []Option, t0 time.Time) *call {
	t.Helper()
	tr, err := otelstats.NewTracker(otelstats.WithTracerProvider(tracenoop.NewTracerProvider()), otelstats.WithMeterProvider(metricnoop.NewMeterProvider()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	up, _ := url.Parse("http://127.0.0.1:8000/v1")
	p, err := NewProxy(up, tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodPost, "http://proxy/v1/chat/completions", nil)
	c := p.newCall(r, "/v1/chat/completions", OperationChat)
	c.ex.arrived = t0
	q, err := tr.Arrive(context.Background(), c.id, otelstats.Arrival{Time: t0, Model: "m", TraceID: c.traceID})
	if err != nil {
		t.Fatal(err)
	}
	c.ex.q = q
	return c
}

type spanView struct {
	Name, Kind    string
	Start, End    int64
	Attrs         []attribute.KeyValue
	Events        []eventView
	Status        sdktrace.Status
	Scope         string
	Resource      attribute.Distinct
	Links, Childs int
}

type eventView struct {
	Name  string
	Time  int64
	Attrs []attribute.KeyValue
}

func views(ss []sdktrace.ReadOnlySpan) []spanView {
	out := make([]spanView, 0, len(ss))
	for _, s := range ss {
		v := spanView{Name: s.Name(), Kind: s.SpanKind().String(), Start: s.StartTime().UnixNano(), End: s.EndTime().UnixNano(),
			Attrs: s.Attributes(), Status: s.Status(), Scope: s.InstrumentationScope().Name + "@" + s.InstrumentationScope().Version,
			Resource: s.Resource().Equivalent(), Links: len(s.Links()), Childs: s.ChildSpanCount()}
		for _, e := range s.Events() {
			v.Events = append(v.Events, eventView{e.Name, e.Time.UnixNano(), e.Attributes})
		}
		out = append(out, v)
	}
	return out
}
