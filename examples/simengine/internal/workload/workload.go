// Package workload reads request traces for the simulated engine: the Azure
// LLM inference trace CSVs (TIMESTAMP,ContextTokens,GeneratedTokens) or a
// user's file with the same columns, and generates a synthetic Poisson
// workload when no trace is at hand.
package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Request is one request of a workload.
type Request struct {
	// Arrival is when the request arrives (UTC).
	Arrival      time.Time
	PromptTokens int
	OutputTokens int
	// Adapter is the LoRA adapter serving the request ("" for the base
	// model; AssignAdapters).
	Adapter string
	// Images is the number of images the request carries (AssignImages);
	// ImagesLast places them at the end of the prompt instead of right
	// after the system prompt.
	Images     int
	ImagesLast bool
}

// Workload is a named list of requests in arrival order.
type Workload struct {
	// Name says where the requests come from (a file's base name, or
	// "synthetic").
	Name     string
	Requests []Request
}

// Span is the time from the first arrival to the last.
func (w *Workload) Span() time.Duration {
	if len(w.Requests) == 0 {
		return 0
	}
	return w.Requests[len(w.Requests)-1].Arrival.Sub(w.Requests[0].Arrival)
}

// Head keeps the first n requests (all when n <= 0 or n exceeds the count).
func (w *Workload) Head(n int) {
	if n > 0 && n < len(w.Requests) {
		w.Requests = w.Requests[:n]
	}
}

// ScaleRate divides every inter-arrival gap by x (x = 2 doubles the arrival
// rate), keeping the first arrival where it is. Lengths are unchanged.
func (w *Workload) ScaleRate(x float64) error {
	if !(x > 0) || math.IsInf(x, 0) {
		return fmt.Errorf("workload: rate scale must be positive, got %v", x)
	}
	if x == 1 || len(w.Requests) == 0 {
		return nil
	}
	t0 := w.Requests[0].Arrival
	for i := range w.Requests {
		d := w.Requests[i].Arrival.Sub(t0)
		w.Requests[i].Arrival = t0.Add(time.Duration(math.Round(float64(d) / x)))
	}
	return nil
}

// Shift moves every arrival so the first one is at t0.
func (w *Workload) Shift(t0 time.Time) {
	if len(w.Requests) == 0 {
		return
	}
	d := t0.Sub(w.Requests[0].Arrival)
	for i := range w.Requests {
		w.Requests[i].Arrival = w.Requests[i].Arrival.Add(d)
	}
}

// timeLayout parses the trace's "2023-11-16 18:15:46.6805900" (any number of
// fractional digits, or none).
const timeLayout = "2006-01-02 15:04:05.999999999"

// maxTokens bounds a row's token counts; anything larger is a broken row.
const maxTokens = 1 << 24

// Read parses a CSV with a header naming the columns TIMESTAMP,
// ContextTokens and GeneratedTokens (in any order, other columns ignored).
// Timestamps are UTC. Rows are returned sorted by arrival (stable). Errors
// name the line.
func Read(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	iTS, iCtx, iGen := -1, -1, -1
	var out []Request
	for sc.Scan() {
		line++
		text := strings.TrimSpace(strings.TrimSuffix(sc.Text(), "\r"))
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff")
		}
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Split(text, ",")
		if iTS < 0 {
			for i, f := range fields {
				switch strings.ToLower(strings.TrimSpace(f)) {
				case "timestamp":
					iTS = i
				case "contexttokens":
					iCtx = i
				case "generatedtokens":
					iGen = i
				}
			}
			if iTS < 0 || iCtx < 0 || iGen < 0 {
				return nil, fmt.Errorf("line %d: header must name TIMESTAMP, ContextTokens and GeneratedTokens, got %q", line, text)
			}
			continue
		}
		need := max(iTS, iCtx, iGen) + 1
		if len(fields) < need {
			return nil, fmt.Errorf("line %d: %d fields, want at least %d", line, len(fields), need)
		}
		ts, err := time.ParseInLocation(timeLayout, strings.TrimSpace(fields[iTS]), time.UTC)
		if err != nil {
			return nil, fmt.Errorf("line %d: TIMESTAMP: %w", line, err)
		}
		ctx, err := count(fields[iCtx])
		if err != nil {
			return nil, fmt.Errorf("line %d: ContextTokens: %w", line, err)
		}
		gen, err := count(fields[iGen])
		if err != nil {
			return nil, fmt.Errorf("line %d: GeneratedTokens: %w", line, err)
		}
		out = append(out, Request{Arrival: ts, PromptTokens: ctx, OutputTokens: gen})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if iTS < 0 {
		return nil, errors.New("no header line")
	}
	slices.SortStableFunc(out, func(a, b Request) int { return a.Arrival.Compare(b.Arrival) })
	return out, nil
}

func count(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if n < 0 || n > maxTokens {
		return 0, fmt.Errorf("%d out of range [0, %d]", n, maxTokens)
	}
	return n, nil
}

// Load reads the CSV at path.
func Load(path string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reqs, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s: no requests", path)
	}
	return &Workload{Name: filepath.Base(path), Requests: reqs}, nil
}

// DefaultTrace is the trace replayed by default, relative to the directory
// that holds the repository (see ../shared/workloads/README.md).
const DefaultTrace = "shared/workloads/azure-llm-2023-conv.csv"

// FindDefault looks for the default trace: ../shared/workloads/… relative to
// the working directory, to every parent directory holding a go.mod (the
// repository root, from anywhere inside it), and to this source file's
// repository (for `go run` from elsewhere on the machine that built it). It
// returns "" when none exists.
func FindDefault() string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
		for d := wd; ; {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dirs = append(dirs, d)
			}
			p := filepath.Dir(d)
			if p == d {
				break
			}
			d = p
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		// file is <root>/examples/simengine/internal/workload/workload.go.
		dirs = append(dirs, filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "..", DefaultTrace)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return filepath.Clean(p)
		}
	}
	return ""
}

// SyntheticEpoch is the first arrival of synthetic workloads.
var SyntheticEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Synthetic is a Poisson workload: n requests arriving at rate per second,
// with log-normal prompt and output lengths roughly like a chat service
// (medians 800 and 180 tokens; prompts clamped to [16, 7000], outputs to
// [1, 1000]). The same seed gives the same workload.
func Synthetic(n int, rate float64, seed uint64) *Workload {
	if rate <= 0 {
		rate = 5
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &Workload{Name: "synthetic", Requests: make([]Request, 0, n)}
	t := SyntheticEpoch
	for i := range n {
		if i > 0 {
			t = t.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		w.Requests = append(w.Requests, Request{
			Arrival:      t,
			PromptTokens: lognormal(rng, 800, 0.9, 16, 7000),
			OutputTokens: lognormal(rng, 180, 0.8, 1, 1000),
		})
	}
	return w
}

func lognormal(rng *rand.Rand, median, sigma float64, lo, hi int) int {
	v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, lo), hi)
}
