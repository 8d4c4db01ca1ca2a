package otelstats

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// splitSides splits a request's updates, in time order, into what the
// frontend and the engine record, each in its own order.
func splitSides(ops []Update) (fe, en []Update) {
	for _, u := range ops {
		side := u.Side
		if side == SideAuto {
			side = sideOf(u.Kind)
			if side == SideAuto {
				side = SideFrontend
			}
		}
		if side == SideEngine {
			en = append(en, u)
		} else {
			fe = append(fe, u)
		}
	}
	return fe, en
}

// interleave merges two streams, each kept in its own order, as picked by
// rng (nil: all of a first, then all of b).
func interleave(a, b []Update, rng *rand.Rand) []Update {
	out := make([]Update, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		takeA := len(b) == 0 || len(a) > 0 && (rng == nil || rng.IntN(2) == 0)
		if takeA {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// spanShape is what a span tree must keep whatever the delivery order.
type spanShape struct {
	name       string
	start, end time.Time
	attrs      string
	events     int
}

func shapes(root sdktrace.ReadOnlySpan, kids []sdktrace.ReadOnlySpan) []spanShape {
	var out []spanShape
	for _, s := range append([]sdktrace.ReadOnlySpan{root}, kids...) {
		kv := slices.Clone(s.Attributes())
		slices.SortFunc(kv, func(a, b attribute.KeyValue) int {
			if a.Key < b.Key {
				return -1
			}
			if a.Key > b.Key {
				return 1
			}
			return 0
		})
		out = append(out, spanShape{s.Name(), s.StartTime(), s.EndTime(), fmt.Sprint(kv), len(s.Events())})
	}
	slices.SortFunc(out, func(a, b spanShape) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}

// sameTreeButLaterRuns checks got against want where the frontend's
// deliveries reached the tracker before any engine update, with the engine
// not present: their times were not kept, so a run after a preemption
// begins its decode at the engine's first step, not at its first delivery.
// Only that boundary may differ, and only earlier, inside its prefill; every
// span, attribute and token count is the same.
func sameTreeButLaterRuns(t *testing.T, got, want []spanShape) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("span tree differs:\n got %v\nwant %v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		later := strings.Contains(w.attrs, `"llm.prefill.recompute":true`) || w.name == "llm.decode" && !strings.Contains(w.attrs, `"llm.decode.segment":0}`)
		same := g.name == w.name && g.attrs == w.attrs && g.events == w.events
		switch {
		case !later:
			same = same && g == w
		case w.name == "llm.prefill":
			same = same && g.start.Equal(w.start) && !g.end.After(w.end) && g.end.After(g.start)
		default:
			same = same && g.end.Equal(w.end) && !g.start.After(w.start)
		}
		if !same {
			t.Errorf("span %d differs:\n got %v\nwant %v", i, g, w)
		}
	}
}

// TestTwoStreamsAnyOrder (SPEC §1): the frontend's and the engine's updates
// travel separately, so either side's FINISHED can reach the tracker before
// the other side's earlier updates. With the other side present (here, a
// connected producer of each side), nothing of the request is lost whatever
// the order the two streams are delivered in: its RequestStats and span
// tree equal those of the updates recorded in time order.
func TestTwoStreamsAnyOrder(t *testing.T) {
	run := func(t *testing.T, ops []Update, connected bool) (*harness, RequestStats) {
		h := newHarness(t)
		if connected {
			defer h.tr.SideConnected(SideFrontend)()
			defer h.tr.SideConnected(SideEngine)()
		}
		h.feed(ops)
		h.tr.Flush() // a side that never sends FINISHED: the log's end
		if n := h.rejects(""); n != 0 {
			t.Fatalf("%d updates rejected", n)
		}
		if n := h.tr.InFlight(); n != 0 {
			t.Fatalf("InFlight = %d", n)
		}
		return h, h.statsOf(ops[0].RequestID)
	}
	for _, sc := range scenarios {
		if sc.finish != nil {
			continue // ended by a Sweep at a chosen time: order-dependent by design
		}
		t.Run(sc.name, func(t *testing.T) {
			h0, want := run(t, sc.ops, true)
			r0, k0 := h0.treeOf(want)
			wantTree := shapes(r0, k0)
			fe, en := splitSides(sc.ops)
			orders := map[string][]Update{
				"frontend's stream first": interleave(fe, en, nil),
				"engine's stream first":   interleave(en, fe, nil),
			}
			for seed := range uint64(8) {
				orders[fmt.Sprintf("interleaved %d", seed)] = interleave(fe, en, rand.New(rand.NewPCG(seed, 7)))
			}
			for name, ops := range orders {
				t.Run(name, func(t *testing.T) {
					h, got := run(t, ops, true)
					sameStats(t, got, want)
					r, k := h.treeOf(got)
					if gotTree := shapes(r, k); !slices.Equal(gotTree, wantTree) {
						t.Errorf("span tree differs:\n got %v\nwant %v", gotTree, wantTree)
					}
				})
			}
			// A fresh tracker, no producer connected: the frontend's
			// stream but its FINISHED, then the engine's. The engine is
			// not present while the deliveries arrive, so their times
			// are not kept aside, yet the request is still open when the
			// engine's updates come: they build its runs.
			t.Run("frontend's stream first, its FINISHED last, fresh tracker", func(t *testing.T) {
				last := len(fe) - 1
				if fe[last].Kind != KindFinished {
					t.Skip("no frontend FINISHED")
				}
				ops := append(append(slices.Clone(fe[:last]), en...), fe[last])
				h, got := run(t, ops, false)
				sameStats(t, got, want)
				r, k := h.treeOf(got)
				sameTreeButLaterRuns(t, shapes(r, k), wantTree)
			})
			// A fresh tracker, no producer connected: the engine's whole
			// stream, held until its ARRIVED, says the frontend's runs
			// behind, so an engine FINISHED among it waits for the rest.
			t.Run("engine's stream first, fresh tracker", func(t *testing.T) {
				h, got := run(t, interleave(en, fe, nil), false)
				sameStats(t, got, want)
				r, k := h.treeOf(got)
				if gotTree := shapes(r, k); !slices.Equal(gotTree, wantTree) {
					t.Errorf("span tree differs:\n got %v\nwant %v", gotTree, wantTree)
				}
			})
		})
	}
}

// TestWaitEndsAtItsTime (SPEC §1): an update of the side a request waits
// for that comes after the grace period is rejected as after_finished, and
// the request ends as the wait's end would have ended it — whether or not
// a sweep ran in between. A replayed log's result hung on that: an
// unrelated line between the two FINISHEDs ended the wait, without it the
// late FINISHED was taken.
func TestWaitEndsAtItsTime(t *testing.T) {
	engine := []Update{
		inputProcessed("r", 1, 10), queued("r", 2), prefilling("r", 3, 10, 0),
		decoding("r", 100, 1), detok("r", 101, 1, 0), enFinished("r", 300, "stop"),
	}
	for _, c := range []struct {
		name string
		late func(h *harness, q *Request) error
	}{
		{"frontend FINISHED", func(h *harness, _ *Request) error { return h.tr.Record(feFinished("r", 4500, "stop")) }},
		{"frontend delivery", func(h *harness, _ *Request) error { return h.tr.Record(detok("r", 4500, 1, 0)) }},
		{"frontend delivery, fast path", func(_ *harness, q *Request) error { return q.Detokenized(at(4500), 1, 0) }},
	} {
		for _, between := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unrelated line between=%v", c.name, between), func(t *testing.T) {
				h := newHarness(t, WithFrontendGrace(2*time.Second))
				q, err := h.tr.Arrive(context.Background(), "r", Arrival{Time: at(0), Model: "m"})
				if err != nil {
					t.Fatal(err)
				}
				h.feed(engine)
				if between {
					h.must(arrived("other", 3000, "m", "chat"))
				}
				if err := c.late(h, q); !errors.Is(err, ReasonAfterFinished) {
					t.Errorf("late update: %v, want after_finished", err)
				}
				s := h.statsOf("r")
				wantLatency(t, "e2e ends at the engine's FINISHED", s.E2ELatency, 300)
				if s.FinishReason != "stop" || s.NumOutputTokens != 1 {
					t.Errorf("reason %q, %d tokens", s.FinishReason, s.NumOutputTokens)
				}
			})
		}
	}
}

// The same for the engine's side on Step's fast path: the frontend
// finished, the engine's decode comes after the wait.
func TestWaitEndsAtItsTimeStep(t *testing.T) {
	h := newHarness(t, WithFrontendGrace(2*time.Second))
	q, err := h.tr.Arrive(context.Background(), "r", Arrival{Time: at(0), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	h.feed([]Update{inputProcessed("r", 1, 10), queued("r", 2), prefilling("r", 3, 10, 0), decoding("r", 100, 1),
		detok("r", 101, 1, 0), feFinished("r", 300, "stop")})
	err = h.tr.Step(&Step{Time: at(4500), Decoded: []Decoded{{Req: q, NewTokens: 1}}})
	if !errors.Is(err, ReasonAfterFinished) {
		t.Errorf("late decode: %v, want after_finished", err)
	}
	s := h.statsOf("r")
	wantLatency(t, "e2e ends at the frontend's FINISHED", s.E2ELatency, 300)
	if s.NumOutputTokens != 1 {
		t.Errorf("%d tokens", s.NumOutputTokens)
	}
}

// A frontend that says it will finish the request (an HTTP layer, a
// wrapper: Arrival.FrontendFinishes) is waited for when the engine's
// FINISHED comes first, though it sent nothing but ARRIVED yet: in one
// process the engine's loop often ends a request before the handler has
// written the response, and the handler's FINISHED — a 500, the client's
// end — must not be rejected as after_finished.
func TestFrontendFinishesWaitedFor(t *testing.T) {
	for _, says := range []bool{false, true} {
		t.Run(fmt.Sprint("FrontendFinishes=", says), func(t *testing.T) {
			h := newHarness(t, WithFrontendGrace(2*time.Second))
			q, err := h.tr.Arrive(context.Background(), "r", Arrival{Time: at(0), Model: "m", FrontendFinishes: says})
			if err != nil {
				t.Fatal(err)
			}
			h.feed([]Update{queued("r", 1), prefilling("r", 2, 7, 0), decoding("r", 4, 1), enFinished("r", 5, "stop")})
			err = q.Fail(at(9), "500")
			s := h.statsOf("r")
			if !says {
				// An engine that records arrivals itself: its FINISHED ends it.
				if !errors.Is(err, ReasonAfterFinished) || s.FinishReason != "stop" {
					t.Errorf("err %v, reason %q", err, s.FinishReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("the frontend's FINISHED: %v", err)
			}
			if s.FinishReason != FinishError || s.ErrorType != "500" {
				t.Errorf("reason %q error.type %q, want error, 500", s.FinishReason, s.ErrorType)
			}
			wantLatency(t, "e2e to the frontend's FINISHED", s.E2ELatency, 9)
		})
	}
}

// A response in one piece whose engine reported its steps: the steps time
// the tokens, the usage the client got counts them (SPEC §8).
func TestOneShotCountWithEngine(t *testing.T) {
	h := newHarness(t)
	h.feed([]Update{arrived("r", 0, "m", "chat"), inputProcessed("r", 1, 4), queued("r", 2), prefilling("r", 3, 4, 0),
		decoding("r", 10, 1), decoding("r", 20, 1), decoding("r", 30, 1), enFinished("r", 30, "stop"),
		{RequestID: "r", Kind: KindFinished, Time: at(31), FinishReason: "stop", NumOutputTokens: 5}})
	s := h.statsOf("r")
	if s.NumOutputTokens != 5 {
		t.Errorf("output tokens %d, want the usage's 5", s.NumOutputTokens)
	}
	wantLatency(t, "ttft from the engine's first step", s.FirstTokenLatency, 10)
}
