package loadgen

import (
	"context"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runGuarded runs one level and fails the test when it does not return
// (a hang guard, not a measurement).
func runGuarded(t *testing.T, r *Runner, ctx context.Context, c Config) Result {
	t.Helper()
	type out struct {
		res Result
		err error
	}
	ran := make(chan out, 1)
	go func() { res, err := r.Run(ctx, c); ran <- out{res, err} }()
	select {
	case o := <-ran:
		if o.err != nil {
			t.Fatal(o.err)
		}
		t.Log(strings.Join(o.res.Fields(), " "))
		return o.res
	case <-time.After(60 * time.Second):
		buf := make([]byte, 1<<16)
		t.Fatalf("Run did not return\n%s", buf[:runtime.Stack(buf, true)])
	}
	return Result{}
}

// TestRunHugeRate: a rate no engine loop can take is shed, counted, and
// the level still ends with its window; the counts never overflow.
// (Shedding one request at a time never ended a step at -rate 1e20.)
func TestRunHugeRate(t *testing.T) {
	for _, rate := range []float64{1e9, 1e20, 1e300} {
		r, _ := newRunner(t, &fakeExporter{})
		res := runGuarded(t, r, context.Background(), Config{Rate: rate, Duration: 100 * time.Millisecond, InFlight: 8, OutputTokens: 2})
		if res.Offered <= 0 || res.Shed <= 0 || res.Shed > res.Offered || res.Completed+res.Drained != res.Offered-res.Shed {
			t.Errorf("rate %g: offered %d shed %d completed %d drained %d", rate, res.Offered, res.Shed, res.Completed, res.Drained)
		}
		if res.Sustained() {
			t.Errorf("rate %g: sustained", rate)
		}
	}
}

// TestRunInterruptDuringModelTime: an interrupt ends the level while the
// loop waits out a step's model time, however long -step-time is.
func TestRunInterruptDuringModelTime(t *testing.T) {
	r, _ := newRunner(t, &fakeExporter{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	res := runGuarded(t, r, ctx, Config{Rate: 1000, Duration: time.Hour, StepTime: time.Hour, InFlight: 4, OutputTokens: 2})
	if !res.Interrupted || res.Offered == 0 {
		t.Errorf("interrupted %v offered %d", res.Interrupted, res.Offered)
	}
	if res.Produced != res.Exported+res.Dropped+res.Pending {
		t.Errorf("produced %d != exported %d + dropped %d + pending %d", res.Produced, res.Exported, res.Dropped, res.Pending)
	}
}

// TestFindMaxBelowOne: a start rate under one request/s runs a paced level
// at 1/s, never a flat-out one (math.Round made 0.3 a rate of 0).
func TestFindMaxBelowOne(t *testing.T) {
	r, _ := newRunner(t, &fakeExporter{})
	_, all, err := r.FindMax(context.Background(), Config{Rate: 0.3, Duration: 50 * time.Millisecond, InFlight: 4}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Config.Rate != 1 {
		for _, res := range all {
			t.Log(strings.Join(res.Fields(), " "))
		}
		t.Fatalf("levels %d, first at rate %v; want one at 1", len(all), all[0].Config.Rate)
	}
}

// TestNewLevelHugeBatch: a batch size far beyond what will ever run does
// not allocate its slices up front (an -in-flight 1e9 died out of memory).
func TestNewLevelHugeBatch(t *testing.T) {
	r, _ := newRunner(t, &fakeExporter{})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l := r.newLevel(Config{Rate: 1, Duration: time.Second, InFlight: 1 << 24}.withDefaults())
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("a level of batch %d allocated %d MiB up front", l.c.InFlight, got>>20)
	}
}

// TestRunInterruptAbortsInFlight: an interrupt ends the level at once
// however long its requests are: what is in flight is aborted in one step
// (engine and frontend), not drained token by token, and its spans are
// accounted for.
func TestRunInterruptAbortsInFlight(t *testing.T) {
	r, _ := newRunner(t, &fakeExporter{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	res := runGuarded(t, r, ctx, Config{Rate: 1000, Duration: time.Hour, InFlight: 4, OutputTokens: 1 << 30})
	if !res.Interrupted || res.Offered == 0 || res.Rejected != 0 {
		t.Errorf("interrupted %v offered %d rejected %d", res.Interrupted, res.Offered, res.Rejected)
	}
	if res.Completed+res.Drained != 0 {
		t.Errorf("%d requests of 2^30 tokens completed", res.Completed+res.Drained)
	}
	if res.Produced == 0 || res.Produced != res.Exported+res.Dropped+res.Pending {
		t.Errorf("produced %d != exported %d + dropped %d + pending %d", res.Produced, res.Exported, res.Dropped, res.Pending)
	}
	if n := r.tr.InFlight(); n != 0 {
		t.Errorf("%d requests left in flight", n)
	}
}

// TestRunInterruptDuringArrivals: an interrupt ends a step that admits
// more requests than the tracker can hold (a huge rate into a huge batch),
// instead of admitting all of them first.
func TestRunInterruptDuringArrivals(t *testing.T) {
	for _, rate := range []float64{0, 1e20} {
		r, _ := newRunner(t, &fakeExporter{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		res := runGuarded(t, r, ctx, Config{Rate: rate, Duration: time.Hour, InFlight: 1 << 30, OutputTokens: 1})
		cancel()
		if !res.Interrupted || res.Offered == 0 || res.Offered < res.Shed {
			t.Errorf("rate %g: interrupted %v offered %d shed %d", rate, res.Interrupted, res.Offered, res.Shed)
		}
	}
}

// TestRunHugeBatchAdmits: a batch so large that 16 × it, the default
// waiting bound, passes the largest int admits arrivals like any other;
// the bound wrapped negative and every arrival was shed.
func TestRunHugeBatchAdmits(t *testing.T) {
	for _, inFlight := range []int{math.MaxInt / 8, math.MaxInt} {
		r, _ := newRunner(t, &fakeExporter{})
		res := runGuarded(t, r, context.Background(), Config{Rate: 200, Duration: 100 * time.Millisecond, InFlight: inFlight, OutputTokens: 2})
		if res.Offered <= 0 || res.Shed != 0 {
			t.Errorf("in flight %d: offered %d, shed %d", inFlight, res.Offered, res.Shed)
		}
	}
}
