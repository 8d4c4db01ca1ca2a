package testbackend

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OTLP span kinds, as Span.Kind holds them.
const (
	SpanKindUnspecified = 0
	SpanKindInternal    = 1
	SpanKindServer      = 2
	SpanKindClient      = 3
	SpanKindProducer    = 4
	SpanKindConsumer    = 5
)

// OTLP status codes, as Status.Code holds them.
const (
	StatusUnset = 0
	StatusOK    = 1
	StatusError = 2
)

// ErrTraceNotFound is returned by GetTrace when Jaeger has no such trace
// (yet: spans become queryable some 30–200 ms after the exporter flushes).
var ErrTraceNotFound = errors.New("trace not found")

// Trace is one trace as Jaeger stored it, spans ordered by start time.
type Trace struct {
	TraceID string // 32 lowercase hex digits
	Spans   []Span
}

// Span is one span read back from Jaeger. Attribute values are string,
// int64, float64, bool, []byte, []any (arrays) or map[string]any (kvlists).
type Span struct {
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex; empty for a root span
	Name         string
	Kind         int // SpanKind* constants
	// Start and end in Unix nanoseconds.
	StartUnixNano uint64
	EndUnixNano   uint64
	Attributes    map[string]any
	Events        []Event
	Links         []Link
	Status        Status

	ServiceName        string         // the resource's service.name
	ResourceAttributes map[string]any // all resource attributes
	ScopeName          string         // instrumentation scope
	ScopeVersion       string
}

// Event is a span event.
type Event struct {
	Name         string
	TimeUnixNano uint64
	Attributes   map[string]any
}

// Link is a span link.
type Link struct {
	TraceID    string
	SpanID     string
	Attributes map[string]any
}

// Status is a span status.
type Status struct {
	Code    int // Status* constants
	Message string
}

// Start returns the span's start time.
func (s Span) Start() time.Time { return time.Unix(0, int64(s.StartUnixNano)) }

// End returns the span's end time.
func (s Span) End() time.Time { return time.Unix(0, int64(s.EndUnixNano)) }

// Duration returns end minus start.
func (s Span) Duration() time.Duration { return time.Duration(s.EndUnixNano - s.StartUnixNano) }

// Root returns the trace's root span (the first span with no parent).
func (t *Trace) Root() (Span, bool) {
	for _, s := range t.Spans {
		if s.ParentSpanID == "" {
			return s, true
		}
	}
	return Span{}, false
}

// Span returns the first span (by start time) with the given name.
func (t *Trace) Span(name string) (Span, bool) {
	for _, s := range t.Spans {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}

// SpansNamed returns every span with the given name, by start time.
func (t *Trace) SpansNamed(name string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Children returns the spans whose parent is spanID, by start time.
func (t *Trace) Children(spanID string) []Span {
	var out []Span
	for _, s := range t.Spans {
		if s.ParentSpanID == spanID {
			out = append(out, s)
		}
	}
	return out
}

// GetTrace fetches one trace through GET /api/v3/traces/{traceID}. The trace
// comes back raw (Jaeger's adjusters off), i.e. exactly as exported. It
// returns an error wrapping ErrTraceNotFound while Jaeger has no span of it.
func (j *Jaeger) GetTrace(ctx context.Context, traceIDHex string) (*Trace, error) {
	id := strings.ToLower(traceIDHex)
	body, err := j.get(ctx, "/api/v3/traces/"+url.PathEscape(id), url.Values{"raw_traces": {"true"}})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("trace %s: %w", id, ErrTraceNotFound)
		}
		return nil, err
	}
	traces, err := decodeTraces(body)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", id, err)
	}
	for _, t := range traces {
		if t.TraceID == id {
			return t, nil
		}
	}
	return nil, fmt.Errorf("trace %s: %w (response held %d other traces)", id, ErrTraceNotFound, len(traces))
}

// WaitTrace polls GetTrace until the trace has at least wantSpans spans and
// returns it, or returns the last state seen when ctx ends. If ctx has no
// deadline, it gives up after 30 s.
func (j *Jaeger) WaitTrace(ctx context.Context, traceIDHex string, wantSpans int) (*Trace, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var (
		tr   *Trace
		err  error
		last string
	)
	ok := poll(ctx, func() bool {
		tr, err = j.GetTrace(ctx, traceIDHex)
		switch {
		case err != nil:
			last = err.Error()
			return false
		case len(tr.Spans) < wantSpans:
			last = fmt.Sprintf("trace %s has %d of %d spans", tr.TraceID, len(tr.Spans), wantSpans)
			return false
		}
		return true
	})
	if ok {
		return tr, nil
	}
	return tr, fmt.Errorf("waiting for trace %s with %d spans: %w; last: %s", traceIDHex, wantSpans, context.Cause(ctx), last)
}

// Services lists the service names Jaeger has seen (GET /api/v3/services),
// sorted.
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	body, err := j.get(ctx, "/api/v3/services", nil)
	if err != nil {
		return nil, err
	}
	var r struct {
		Services []string `json:"services"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding services: %w", err)
	}
	slices.Sort(r.Services)
	return r.Services, nil
}

// TraceQuery is a search for FindTracesQuery.
type TraceQuery struct {
	Service   string // required
	Operation string // span name; optional
	// Spans started within [StartMin, StartMax]. Zero values mean from the
	// Unix epoch (so replayed, old timestamps match) to an hour from now.
	StartMin, StartMax time.Time
	DurationMin        time.Duration // optional
	DurationMax        time.Duration // optional
	Limit              int           // max traces; <= 0 means 100
}

// FindTraces returns up to limit traces that have spans of service (v3
// search, GET /api/v3/traces), newest first. No match is an empty result,
// not an error.
func (j *Jaeger) FindTraces(ctx context.Context, service string, limit int) ([]*Trace, error) {
	return j.FindTracesQuery(ctx, TraceQuery{Service: service, Limit: limit})
}

// FindTracesQuery is FindTraces with every v3 search parameter.
func (j *Jaeger) FindTracesQuery(ctx context.Context, q TraceQuery) ([]*Trace, error) {
	if q.StartMin.IsZero() {
		q.StartMin = time.Unix(0, 0)
	}
	if q.StartMax.IsZero() {
		q.StartMax = time.Now().Add(time.Hour)
	}
	if q.Limit <= 0 {
		q.Limit = 100
	}
	v := url.Values{
		"query.service_name":   {q.Service},
		"query.start_time_min": {q.StartMin.UTC().Format(time.RFC3339Nano)},
		"query.start_time_max": {q.StartMax.UTC().Format(time.RFC3339Nano)},
		"query.num_traces":     {strconv.Itoa(q.Limit)},
		"query.raw_traces":     {"true"},
	}
	if q.Operation != "" {
		v.Set("query.operation_name", q.Operation)
	}
	if q.DurationMin > 0 {
		v.Set("query.duration_min", q.DurationMin.String())
	}
	if q.DurationMax > 0 {
		v.Set("query.duration_max", q.DurationMax.String())
	}
	body, err := j.get(ctx, "/api/v3/traces", v)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	traces, err := decodeTraces(body)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(traces, func(a, b *Trace) int {
		return cmp.Compare(traceStart(b), traceStart(a))
	})
	return traces, nil
}

func traceStart(t *Trace) uint64 {
	if len(t.Spans) == 0 {
		return 0
	}
	return t.Spans[0].StartUnixNano
}

// httpError is a non-2xx answer from a backend.
type httpError struct {
	URL    string
	Status int
	Body   string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d: %s", e.URL, e.Status, strings.TrimSpace(e.Body))
}

func isNotFound(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}

func (j *Jaeger) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := j.QueryURL() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return httpGet(ctx, j.client, u)
}

func httpGet(ctx context.Context, client *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading body: %w", u, err)
	}
	if resp.StatusCode/100 != 2 {
		if len(body) > 2048 {
			body = body[:2048]
		}
		return nil, &httpError{URL: u, Status: resp.StatusCode, Body: string(body)}
	}
	return body, nil
}

// poll calls done with growing pauses (10 ms up to 250 ms) until it returns
// true (poll returns true) or ctx ends (false).
func poll(ctx context.Context, done func() bool) bool {
	delay := 10 * time.Millisecond
	for {
		if done() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// --- OTLP-JSON decoding (as Jaeger's /api/v3 writes it) ---

type otlpResponse struct {
	Result struct {
		ResourceSpans []otlpResourceSpans `json:"resourceSpans"`
	} `json:"result"`
}

type otlpResourceSpans struct {
	Resource struct {
		Attributes []otlpKeyValue `json:"attributes"`
	} `json:"resource"`
	ScopeSpans []struct {
		Scope struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"scope"`
		Spans []otlpSpan `json:"spans"`
	} `json:"scopeSpans"`
}

type otlpSpan struct {
	TraceID           string         `json:"traceId"`
	SpanID            string         `json:"spanId"`
	ParentSpanID      string         `json:"parentSpanId"`
	Name              string         `json:"name"`
	Kind              otlpEnum       `json:"kind"`
	StartTimeUnixNano otlpUint64     `json:"startTimeUnixNano"`
	EndTimeUnixNano   otlpUint64     `json:"endTimeUnixNano"`
	Attributes        []otlpKeyValue `json:"attributes"`
	Events            []struct {
		TimeUnixNano otlpUint64     `json:"timeUnixNano"`
		Name         string         `json:"name"`
		Attributes   []otlpKeyValue `json:"attributes"`
	} `json:"events"`
	Links []struct {
		TraceID    string         `json:"traceId"`
		SpanID     string         `json:"spanId"`
		Attributes []otlpKeyValue `json:"attributes"`
	} `json:"links"`
	Status struct {
		Code    otlpEnum `json:"code"`
		Message string   `json:"message"`
	} `json:"status"`
}

type otlpKeyValue struct {
	Key   string       `json:"key"`
	Value otlpAnyValue `json:"value"`
}

type otlpAnyValue struct {
	StringValue *string    `json:"stringValue"`
	BoolValue   *bool      `json:"boolValue"`
	IntValue    *otlpInt64 `json:"intValue"`
	DoubleValue *float64   `json:"doubleValue"`
	BytesValue  *string    `json:"bytesValue"`
	ArrayValue  *struct {
		Values []otlpAnyValue `json:"values"`
	} `json:"arrayValue"`
	KvlistValue *struct {
		Values []otlpKeyValue `json:"values"`
	} `json:"kvlistValue"`
}

// otlpUint64 accepts a JSON string or number (OTLP-JSON writes 64-bit
// integers as strings).
type otlpUint64 uint64

func (u *otlpUint64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*u = 0
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	*u = otlpUint64(v)
	return err
}

type otlpInt64 int64

func (i *otlpInt64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := strconv.ParseInt(s, 10, 64)
	*i = otlpInt64(v)
	return err
}

// otlpEnum accepts an enum as a number or as its proto name
// (SPAN_KIND_SERVER, STATUS_CODE_ERROR).
type otlpEnum int

var otlpEnumNames = map[string]int{
	"SPAN_KIND_UNSPECIFIED": SpanKindUnspecified,
	"SPAN_KIND_INTERNAL":    SpanKindInternal,
	"SPAN_KIND_SERVER":      SpanKindServer,
	"SPAN_KIND_CLIENT":      SpanKindClient,
	"SPAN_KIND_PRODUCER":    SpanKindProducer,
	"SPAN_KIND_CONSUMER":    SpanKindConsumer,
	"STATUS_CODE_UNSET":     StatusUnset,
	"STATUS_CODE_OK":        StatusOK,
	"STATUS_CODE_ERROR":     StatusError,
}

func (e *otlpEnum) UnmarshalJSON(b []byte) error {
	s := string(b)
	if strings.HasPrefix(s, `"`) {
		name := strings.Trim(s, `"`)
		if v, ok := otlpEnumNames[name]; ok {
			*e = otlpEnum(v)
			return nil
		}
		s = name
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("unknown OTLP enum value %s", b)
	}
	*e = otlpEnum(v)
	return nil
}

// otlpID normalises a trace or span ID to lowercase hex. OTLP-JSON uses hex;
// plain protobuf JSON would use base64, accepted too.
func otlpID(s string, byteLen int) string {
	if len(s) == 2*byteLen {
		if _, err := hex.DecodeString(s); err == nil {
			return strings.ToLower(s)
		}
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == byteLen {
		return hex.EncodeToString(b)
	}
	return strings.ToLower(s)
}

func (v otlpAnyValue) value() any {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.BoolValue != nil:
		return *v.BoolValue
	case v.IntValue != nil:
		return int64(*v.IntValue)
	case v.DoubleValue != nil:
		return *v.DoubleValue
	case v.BytesValue != nil:
		b, err := base64.StdEncoding.DecodeString(*v.BytesValue)
		if err != nil {
			return *v.BytesValue
		}
		return b
	case v.ArrayValue != nil:
		out := make([]any, 0, len(v.ArrayValue.Values))
		for _, e := range v.ArrayValue.Values {
			out = append(out, e.value())
		}
		return out
	case v.KvlistValue != nil:
		return attrMap(v.KvlistValue.Values)
	}
	return nil
}

func attrMap(kvs []otlpKeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.value()
	}
	return m
}

// decodeTraces turns an /api/v3 traces response into traces grouped by
// trace ID, in order of first appearance, each with spans by start time.
func decodeTraces(body []byte) ([]*Trace, error) {
	var r otlpResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding OTLP-JSON traces: %w", err)
	}
	byID := map[string]*Trace{}
	var order []*Trace
	for _, rs := range r.Result.ResourceSpans {
		res := attrMap(rs.Resource.Attributes)
		service, _ := res["service.name"].(string)
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s := Span{
					TraceID:            otlpID(sp.TraceID, 16),
					SpanID:             otlpID(sp.SpanID, 8),
					Name:               sp.Name,
					Kind:               int(sp.Kind),
					StartUnixNano:      uint64(sp.StartTimeUnixNano),
					EndUnixNano:        uint64(sp.EndTimeUnixNano),
					Attributes:         attrMap(sp.Attributes),
					Status:             Status{Code: int(sp.Status.Code), Message: sp.Status.Message},
					ServiceName:        service,
					ResourceAttributes: res,
					ScopeName:          ss.Scope.Name,
					ScopeVersion:       ss.Scope.Version,
				}
				if sp.ParentSpanID != "" {
					s.ParentSpanID = otlpID(sp.ParentSpanID, 8)
				}
				for _, e := range sp.Events {
					s.Events = append(s.Events, Event{
						Name:         e.Name,
						TimeUnixNano: uint64(e.TimeUnixNano),
						Attributes:   attrMap(e.Attributes),
					})
				}
				for _, l := range sp.Links {
					s.Links = append(s.Links, Link{
						TraceID:    otlpID(l.TraceID, 16),
						SpanID:     otlpID(l.SpanID, 8),
						Attributes: attrMap(l.Attributes),
					})
				}
				t := byID[s.TraceID]
				if t == nil {
					t = &Trace{TraceID: s.TraceID}
					byID[s.TraceID] = t
					order = append(order, t)
				}
				t.Spans = append(t.Spans, s)
			}
		}
	}
	for _, t := range order {
		slices.SortStableFunc(t.Spans, func(a, b Span) int {
			return cmp.Or(cmp.Compare(a.StartUnixNano, b.StartUnixNano), cmp.Compare(a.Name, b.Name))
		})
	}
	return order, nil
}
