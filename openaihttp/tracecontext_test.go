package openaihttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestIncomingTrust(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	ours := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for _, c := range []struct {
		name         string
		header       string
		base         trace.SpanContext
		trust        bool
		public       bool
		wantValid    bool
		wantSampled  bool
		wantOurs     bool
		wantRemoteID string
		wantLink     bool
	}{
		{name: "no header", wantValid: false},
		{name: "no header, our span", base: ours, wantValid: true, wantSampled: true, wantOurs: true},
		{name: "untrusted unsampled", header: tp, wantValid: true, wantSampled: true, wantRemoteID: "00f067aa0ba902b7"},
		{name: "trusted unsampled", header: tp, trust: true, wantValid: true, wantSampled: false, wantRemoteID: "00f067aa0ba902b7"},
		{name: "public", header: tp, public: true, wantValid: false, wantLink: true},
		{name: "public with our span", header: tp, public: true, base: ours, wantValid: true, wantSampled: true, wantOurs: true, wantLink: true},
		{name: "trusted beats public", header: tp, trust: true, public: true, wantValid: true, wantRemoteID: "00f067aa0ba902b7"},
		{name: "garbage header", header: "00-zz-yy-01", wantValid: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := newConfig([]Option{WithTrustIncomingSamplingFunc(func(*http.Request) bool { return c.trust }),
				WithPublicEndpointFunc(func(*http.Request) bool { return c.public })})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			if c.base.IsValid() {
				r = r.WithContext(trace.ContextWithSpanContext(r.Context(), c.base))
			}
			if c.header != "" {
				r.Header.Set("traceparent", c.header)
			}
			in := cfg.incoming(r)
			sc := trace.SpanContextFromContext(in.ctx)
			if sc.IsValid() != c.wantValid {
				t.Fatalf("valid %v", sc.IsValid())
			}
			if in.link.IsValid() != c.wantLink || c.wantLink && in.link.SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("link %v", in.link)
			}
			if in.trusted != c.trust {
				t.Errorf("trusted %v", in.trusted)
			}
			if !sc.IsValid() {
				return
			}
			if c.wantOurs && !sc.Equal(ours) {
				t.Errorf("parent %v, want our span", sc)
			}
			if c.wantRemoteID != "" && (sc.SpanID().String() != c.wantRemoteID || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736") {
				t.Errorf("parent %v", sc)
			}
			if sc.IsSampled() != c.wantSampled && !(c.trust && c.public) {
				t.Errorf("sampled %v, want %v", sc.IsSampled(), c.wantSampled)
			}
		})
	}
}

// The carrier reads and writes what propagation.HeaderCarrier does.
func TestHeaderCarrier(t *testing.T) {
	for _, key := range []string{"traceparent", "tracestate", "baggage", "x-b3-traceid", "Traceparent", "uber-trace-id"} {
		h1, h2 := http.Header{}, http.Header{}
		propagation.HeaderCarrier(h1).Set(key, "v")
		headerCarrier(h2).Set(key, "v")
		if !reflect.DeepEqual(h1, h2) || headerCarrier(h2).Get(key) != "v" || propagation.HeaderCarrier(h2).Get(key) != "v" {
			t.Errorf("%s: set %v, want %v", key, h2, h1)
		}
	}
	// Every baggage header is read, as with HeaderCarrier.
	bh := http.Header{"Baggage": {"a=1", "b=2"}}
	bag := baggage.FromContext(propagation.Baggage{}.Extract(context.Background(), headerCarrier(bh)))
	if bag.Member("a").Value() != "1" || bag.Member("b").Value() != "2" {
		t.Errorf("baggage %v from two headers", bag)
	}
}
