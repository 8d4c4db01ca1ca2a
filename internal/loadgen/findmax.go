package loadgen

import (
	"context"
	"math"
)

// FindMax searches for the highest offered rate that is Sustained: it
// starts at c.Rate (1000 when 0), doubles while levels are sustained, then
// bisects between the best sustained and the lowest failing rate until they
// are within 10 % or maxLevels levels ran. Each level runs c.Duration;
// report, when set, sees each level as it ends. It returns the best
// sustained level (zero Result if none) and every level.
func (r *Runner) FindMax(ctx context.Context, c Config, maxLevels int, report func(Result)) (Result, []Result, error) {
	rate := c.Rate
	if rate <= 0 {
		rate = 1000
	}
	var best Result
	var all []Result
	lo, hi := 0.0, math.Inf(1)
	for range maxLevels {
		if ctx.Err() != nil {
			break
		}
		c.Rate = max(math.Round(rate), 1) // never 0: that would run flat out
		res, err := r.Run(ctx, c)
		all = append(all, res)
		if report != nil {
			report(res)
		}
		if err != nil {
			return best, all, err
		}
		if ctx.Err() != nil {
			break // an interrupted level says nothing
		}
		if res.Sustained() {
			lo, best = c.Rate, res
		} else {
			hi = c.Rate
		}
		switch {
		case math.IsInf(hi, 1):
			rate = 2 * lo
		case lo == 0:
			rate = hi / 2
		default:
			rate = (lo + hi) / 2
		}
		if !math.IsInf(hi, 1) && hi-lo <= 0.1*hi || rate < 1 {
			break
		}
	}
	return best, all, nil
}
