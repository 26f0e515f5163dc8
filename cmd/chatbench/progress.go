package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// tick is one second of a run, as the progress line showed it.
type tick struct {
	T           float64 `json:"t_s"`       // seconds since the first send
	Phase       string  `json:"phase"`     // warmup, measure, drain
	Sent        int64   `json:"sent"`      // sends issued so far
	Accepted    int64   `json:"accepted"`  // accepted so far
	Delivered   int64   `json:"delivered"` // OnMessage calls so far
	DeliveredPS float64 `json:"delivered_per_s"`
	AcceptedPS  float64 `json:"accepted_per_s"`
	P99         float64 `json:"p99_ms"` // end-to-end p99 of the measured messages so far
	Errors      int64   `json:"errors"`
}

// progress prints a line on stderr once per second and keeps it in
// res.Timeline, until ctx ends.
func (b *bench) progress(ctx context.Context, start time.Time, res *result) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var prev tick
	prevAt := start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r := b.rec
			k := tick{
				T:         now.Sub(start).Seconds(),
				Sent:      r.scheduled.Load(),
				Accepted:  r.accepted.Load(),
				Delivered: r.delivered.Load(),
				Errors:    r.errorCount(),
			}
			switch {
			case now.Before(r.from):
				k.Phase = "warmup"
			case now.Before(r.to):
				k.Phase = "measure"
			default:
				k.Phase = "drain"
			}
			dt := now.Sub(prevAt).Seconds()
			k.DeliveredPS = float64(k.Delivered-prev.Delivered) / dt
			k.AcceptedPS = float64(k.Accepted-prev.Accepted) / dt
			h := r.e2e.merged()
			k.P99 = float64(h.ValueAtQuantile(99)) / 1000
			res.Timeline = append(res.Timeline, k)
			prev, prevAt = k, now
			if !b.cfg.Quiet {
				fmt.Fprintf(os.Stderr, "[%4.0fs %-7s] sent %d  accepted %d (%.0f/s)  delivered %d (%.0f/s)  p99 %.1f ms  errors %d\n",
					k.T, k.Phase, k.Sent, k.Accepted, k.AcceptedPS, k.Delivered, k.DeliveredPS, k.P99, k.Errors)
			}
		}
	}
}
