package main

import (
	"math"
	"time"
)

// rateSearch looks for the highest rate that passes, from start up to max:
// it doubles while steps pass, halves while they fail (down to start/8),
// then bisects between the highest pass and the lowest failure until they
// are within tol of each other (relative), or maxSteps steps were run.
// Rates are rounded to three significant digits.
type rateSearch struct {
	start, max, tol float64
	maxSteps, steps int
	pass, fail      float64 // highest passing and lowest failing rate so far; 0: none yet
}

func newRateSearch(start, max, tol float64, maxSteps int) *rateSearch {
	return &rateSearch{start: start, max: max, tol: tol, maxSteps: maxSteps}
}

// next returns the rate to try next, or false when the search is over.
func (s *rateSearch) next() (float64, bool) {
	if s.steps >= s.maxSteps {
		return 0, false
	}
	var r float64
	switch {
	case s.pass == 0 && s.fail == 0:
		r = s.start
	case s.fail == 0:
		if s.pass >= s.max {
			return 0, false
		}
		r = min(2*s.pass, s.max)
	case s.pass == 0:
		if s.fail <= s.start/8 {
			return 0, false
		}
		r = s.fail / 2
	default:
		if (s.fail-s.pass)/s.pass <= s.tol {
			return 0, false
		}
		r = (s.pass + s.fail) / 2
	}
	r = roundRate(r)
	if r == s.pass || r == s.fail {
		return 0, false
	}
	return r, true
}

// record notes a step's verdict. A pass above a failure (noise) moves the
// failure up: the search then looks above the new pass.
func (s *rateSearch) record(rate float64, passed bool) {
	s.steps++
	switch {
	case passed:
		s.pass = max(s.pass, rate)
		if s.fail != 0 && s.fail <= s.pass {
			s.fail = 0
		}
	case s.fail == 0 || rate < s.fail:
		s.fail = rate
	}
}

// best is the highest passing rate, 0 if none passed.
func (s *rateSearch) best() float64 { return s.pass }

// roundRate rounds r to three significant digits.
func roundRate(r float64) float64 {
	if r <= 0 {
		return r
	}
	p := math.Pow(10, math.Floor(math.Log10(r))-2)
	return math.Round(r/p) * p
}

// judge says whether a load step kept up within target: nothing lost, the
// sends accepted (99% of the measured ones), every measured message pushed
// (none only by the final pull), and the end-to-end p99 within target.
func judge(r *result, target time.Duration) (bool, string) {
	switch {
	case !r.ok():
		return false, "loss check failed"
	case r.Sends.MeasuredScheduled == 0 || float64(r.Sends.MeasuredAccepted) < 0.99*float64(r.Sends.MeasuredScheduled):
		return false, "sends not accepted"
	case r.EndToEnd.Count == 0:
		return false, "no measured push"
	case r.Pushes.Late > 0:
		return false, "messages pushed too late (came by the final pull)"
	case target > 0 && r.EndToEnd.P99 > float64(target.Microseconds())/1000:
		return false, "p99 over the target"
	}
	return true, ""
}
