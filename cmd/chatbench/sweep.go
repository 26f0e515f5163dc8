package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// step is one rate of a sweep or search.
type step struct {
	Rate          float64   `json:"rate_per_s"`
	Pass          bool      `json:"pass"`
	Why           string    `json:"why,omitempty"` // why it did not pass
	AcceptedPerS  float64   `json:"accepted_per_s"`
	OfferedPerS   float64   `json:"offered_pushes_per_s"`
	DeliveredPerS float64   `json:"delivered_pushes_per_s"`
	EndToEnd      quantiles `json:"end_to_end"`
	Accept        quantiles `json:"accept_latency"`
	CPU           cpuUse    `json:"cpu"`
	Result        *result   `json:"result,omitempty"` // nil when the step did not run to the end
}

// sweepResult is the -json document of the sweep and search modes.
type sweepResult struct {
	Mode     string  `json:"mode"` // sweep or find-max
	TargetMS float64 `json:"p99_target_ms"`
	Stack    string  `json:"stack"`
	Shape    string  `json:"shape"`
	Steps    []step  `json:"steps"`
	Best     float64 `json:"best_rate_per_s"` // find-max: the highest passing rate; 0 if none
}

// runSweep runs one load step per rate of cfg.Sweep, or searches the
// highest passing rate (cfg.FindMax). With -chatd every step gets a fresh
// deployment, so an overloaded step leaves no backlog to the next.
func runSweep(ctx context.Context, cfg *Config, stdout io.Writer) error {
	out := &sweepResult{Mode: "sweep", TargetMS: ms(cfg.Target), Stack: cfg.Launch.String(), Shape: shape(cfg)}
	if cfg.Launch.Chatd == "" {
		logf("warning: every step drives the same chatd: an overloaded step leaves a backlog to the next; -chatd starts a fresh one per step")
	}
	var search *rateSearch
	rates := cfg.Sweep
	if cfg.FindMax {
		out.Mode = "find-max"
		search = newRateSearch(cfg.Rate, cfg.MaxRate, cfg.Tolerance, cfg.MaxSteps)
	}
	for i := 0; ; i++ {
		var rate float64
		if search != nil {
			r, ok := search.next()
			if !ok {
				break
			}
			rate = r
		} else {
			if i == len(rates) {
				break
			}
			rate = rates[i]
		}
		logf("step %d: %s msg/s", i+1, fmtRate(rate))
		st, err := runStep(ctx, cfg, i, rate)
		if err != nil {
			return err
		}
		out.Steps = append(out.Steps, st)
		if search != nil {
			search.record(rate, st.Pass)
		}
		logf("%s", st.line(i+1))
	}
	if search != nil {
		out.Best = search.best()
	}
	printSteps(stdout, out)
	if cfg.JSON != "" {
		if err := writeJSONFile(cfg.JSON, out); err != nil {
			return err
		}
	}
	if cfg.Plot != "" {
		title := fmt.Sprintf("chatd end-to-end latency (send to push): %s", out.Shape)
		if err := plotLatency(cfg.Plot, title, out.Steps, cfg.Target); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "plot: %s\n", cfg.Plot)
	}
	return nil
}

// runStep runs the load at rate on its own deployment (or the given one,
// with its own ids). Only a failure to start, or an interrupt, is an error:
// a step that does not keep up is a failed step.
func runStep(ctx context.Context, cfg *Config, i int, rate float64) (step, error) {
	c := *cfg
	c.Rate, c.Prefix, c.JSON = rate, cfg.Prefix+"s"+strconv.Itoa(i+1), ""
	st := step{Rate: rate}
	var res *result
	err := withDeployment(ctx, &c, func(d *deployment) error {
		var err error
		res, err = runLoad(ctx, &c, d)
		return err
	})
	switch {
	case ctx.Err() != nil:
		return st, ctx.Err()
	case res == nil && err != nil:
		var le *launchError
		if errors.As(err, &le) {
			return st, err
		}
		st.Why = "did not run: " + err.Error()
		return st, nil
	}
	st.Result = res
	st.Pass, st.Why = judge(res, cfg.Target)
	st.AcceptedPerS, st.OfferedPerS, st.DeliveredPerS = res.Sends.AcceptedPerS, res.Pushes.OfferedPerS, res.Pushes.DeliveredPerS
	st.EndToEnd, st.Accept, st.CPU = res.EndToEnd, res.AcceptLatency, res.CPU
	return st, nil
}

func (st step) line(n int) string {
	verdict := "PASS"
	if !st.Pass {
		verdict = "FAIL (" + st.Why + ")"
	}
	return fmt.Sprintf("step %d: %8s msg/s  accepted %8.1f/s  pushes %8.0f/s (offered %.0f)  e2e p50 %s p99 %s p99.9 %s  cpu %.2f+%.2f  %s",
		n, fmtRate(st.Rate), st.AcceptedPerS, st.DeliveredPerS, st.OfferedPerS,
		fmtMS(st.EndToEnd.P50, st.EndToEnd.Count), fmtMS(st.EndToEnd.P99, st.EndToEnd.Count), fmtMS(st.EndToEnd.P999, st.EndToEnd.Count),
		st.CPU.Server, st.CPU.Bench, verdict)
}

// fmtRate prints a rate with at most three significant digits (the search
// rounds to three), without a float's noise.
func fmtRate(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'g', 3, 64)
}

func fmtMS(v float64, n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
}

func printSteps(w io.Writer, out *sweepResult) {
	fmt.Fprintf(w, "chatbench %s: %s; stack: %s\n", out.Mode, out.Shape, out.Stack)
	for i, st := range out.Steps {
		fmt.Fprintln(w, st.line(i+1))
	}
	if out.Mode == "find-max" {
		if out.Best > 0 {
			fmt.Fprintf(w, "highest rate with p99 <= %.0f ms, nothing lost, 99%% of the sends accepted, none pushed only by the final pull: %s msg/s\n", out.TargetMS, fmtRate(out.Best))
		} else {
			fmt.Fprintf(w, "no step kept p99 <= %.0f ms with nothing lost\n", out.TargetMS)
		}
	}
}

// shape describes the load's shape in a few words.
func shape(cfg *Config) string {
	ackEvery := cfg.AckEvery
	if ackEvery == 0 {
		ackEvery = 10 // the SDK's default
	}
	s := fmt.Sprintf("%d groups × %d, %.0f%% online, ack every %d, %v steps", cfg.Groups, cfg.GroupSize, 100*cfg.Online,
		ackEvery, cfg.Duration.Round(time.Second))
	if cfg.Read > 0 {
		s += fmt.Sprintf(", %.0f%% read", 100*cfg.Read)
	}
	return s
}
