package workload

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Share is a LoRA adapter and the fraction of requests it serves.
type Share struct {
	Adapter  string
	Fraction float64
}

// Bounds on a mix, so a flag cannot make the demo carry thousands of
// adapter names.
const (
	MaxAdapters    = 16
	MaxAdapterName = 64
	MaxImages      = 16
)

// ParseAdapterMix parses an adapter mix such as "sql-lora=0.3,chat-lora=0.2":
// each adapter serves that fraction of the requests, the rest are served by
// the base model. Names are 1–64 characters of letters, digits, '.', '_',
// '-' and '/'; fractions are in (0, 1] and sum to at most 1. The empty
// string is no adapters.
func ParseAdapterMix(s string) ([]Share, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []Share
	sum := 0.0
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, frac, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("adapter mix: %q is not name=fraction", part)
		}
		name = strings.TrimSpace(name)
		if err := checkAdapterName(name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("adapter mix: %q given twice", name)
		}
		seen[name] = true
		f, err := strconv.ParseFloat(strings.TrimSpace(frac), 64)
		if err != nil || !(f > 0 && f <= 1) {
			return nil, fmt.Errorf("adapter mix: fraction %q of %q must be a number in (0, 1]", frac, name)
		}
		sum += f
		out = append(out, Share{Adapter: name, Fraction: f})
		if len(out) > MaxAdapters {
			return nil, fmt.Errorf("adapter mix: more than %d adapters", MaxAdapters)
		}
	}
	if sum > 1+1e-9 {
		return nil, fmt.Errorf("adapter mix: fractions sum to %g, more than 1", sum)
	}
	return out, nil
}

func checkAdapterName(name string) error {
	if name == "" || len(name) > MaxAdapterName {
		return fmt.Errorf("adapter mix: name %q must have 1 to %d characters", name, MaxAdapterName)
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-', c == '/':
		default:
			return fmt.Errorf("adapter mix: name %q has %q; use letters, digits, '.', '_', '-', '/'", name, c)
		}
	}
	return nil
}

// uniform is a deterministic number in [0, 1) for request i under salt.
func uniform(seed, salt uint64, i int) float64 {
	x := seed ^ salt ^ uint64(i)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return float64(x>>11) / (1 << 53)
}

// AssignAdapters gives each request an adapter by mix, the same for the
// same seed; requests outside every share keep the base model ("").
func (w *Workload) AssignAdapters(mix []Share, seed uint64) {
	for i := range w.Requests {
		u, acc := uniform(seed, 0x6c6f7261, i), 0.0
		w.Requests[i].Adapter = ""
		for _, s := range mix {
			if acc += s.Fraction; u < acc {
				w.Requests[i].Adapter = s.Adapter
				break
			}
		}
	}
}

// AssignImages makes a fraction rate of the requests multimodal, the same
// for the same seed: each carries 1 to maxItems images (uniformly), placed
// at the start of the user's content for half of them and at its end for
// the other half (a question about a picture, or a picture after the
// question).
func (w *Workload) AssignImages(rate float64, maxItems int, seed uint64) error {
	if !(rate >= 0 && rate <= 1) {
		return fmt.Errorf("workload: multimodal rate %v must be in [0, 1]", rate)
	}
	if rate > 0 && (maxItems < 1 || maxItems > MaxImages) {
		return fmt.Errorf("workload: images per request %d must be in [1, %d]", maxItems, MaxImages)
	}
	for i := range w.Requests {
		r := &w.Requests[i]
		r.Images, r.ImagesLast = 0, false
		if uniform(seed, 0x696d67, i) >= rate {
			continue
		}
		r.Images = 1 + int(math.Floor(uniform(seed, 0x6e696d67, i)*float64(maxItems)))
		r.ImagesLast = uniform(seed, 0x706f73, i) < 0.5
	}
	return nil
}

// ParseAcceptance parses a speculative-decoding acceptance model: comma-
// separated probabilities, the i-th being the chance that draft position i
// is accepted when the positions before it were; the last holds for every
// later position ("0.7" is one rate for all).
func ParseAcceptance(s string) ([]float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("acceptance model: empty")
	}
	var out []float64
	for _, part := range strings.Split(s, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(p >= 0 && p <= 1) {
			return nil, fmt.Errorf("acceptance model: %q must be a probability in [0, 1]", part)
		}
		out = append(out, p)
		if len(out) > 64 {
			return nil, errors.New("acceptance model: more than 64 positions")
		}
	}
	return out, nil
}
