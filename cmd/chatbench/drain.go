package main

import (
	"context"
	"time"
)

// load sends for warm-up plus duration (churning members meanwhile when
// asked), drains, pulls every group once more and checks the online
// members for loss.
func (b *bench) load(ctx context.Context) *result {
	cfg := b.cfg
	start := time.Now()
	b.rec.start, b.rec.interval = start, time.Duration(float64(time.Second)/cfg.Rate)
	b.rec.from = start.Add(cfg.Warmup)
	b.rec.to = b.rec.from.Add(cfg.Duration)
	res := &result{}

	pctx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); b.progress(pctx, start, res) }()

	// CPU use over the measured span only: from the end of the warm-up to
	// the last send.
	cpuFrom := make(chan cpuMark, 1)
	go func() {
		if sleepCtx(ctx, cfg.Warmup) {
			cpuFrom <- startCPU(b.dep.Procs)
		}
	}()
	stopChurn := make(chan struct{})
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); b.churn(ctx, stopChurn) }()
	b.sendLoop(ctx, b.rec.to, func() {
		select {
		case m := <-cpuFrom:
			res.CPU = m.stop()
		default:
		}
	})
	close(stopChurn)
	<-churnDone // every churned member is back
	if ctx.Err() != nil {
		stopProgress()
		<-progressDone
		return res
	}
	logf("sends done; waiting for the pushes (up to %v)...", cfg.Drain)
	deadline := time.Now().Add(cfg.Drain)
	b.waitDelivered(ctx, deadline, 3*time.Second)
	l := b.check()
	missingAfterDrain := l.Missing

	// Then Open every group that still misses messages, as a user would,
	// until none does or the drain time is over. An overloaded server may
	// not have stored every message yet: what is still missing at the end
	// was not delivered within -drain, which is not proof of a loss.
	b.rec.finalPull.Store(true)
	rounds := 0
	for first := true; first || l.missing() > 0 && time.Now().Before(deadline) && ctx.Err() == nil; first = false {
		rounds++
		todo := l.incomplete
		if first {
			todo = b.allPairs()
		}
		if !first && !sleepCtx(ctx, time.Second) {
			break
		}
		logf("final pull, round %d: %d (member, group) pairs, %d messages missing...", rounds, len(todo), l.missing())
		b.open(ctx, todo)
		b.waitDelivered(ctx, deadline, 2*time.Second)
		l = b.check()
	}
	stopProgress()
	<-progressDone
	res.Loss = l
	res.Loss.MissingAfterDrain = missingAfterDrain
	res.Loss.PullRounds = rounds
	for _, m := range b.members {
		if c := m.client(); c != nil {
			res.SDK.add(c.Stats())
		}
	}
	res.SDK.plus(b.rec.churnedStats())
	return res
}

// waitDelivered waits until every member was handed every accepted message
// of its groups, or until nothing arrived for quiet, or until deadline.
func (b *bench) waitDelivered(ctx context.Context, deadline time.Time, quiet time.Duration) {
	want := make([]int64, len(b.members))
	b.accMu.Lock()
	for i, m := range b.members {
		for _, g := range b.plan.groupsOf[m.user] {
			want[i] += int64(len(b.accepted[g]))
		}
	}
	b.accMu.Unlock()
	last, lastChange, checked := int64(-1), time.Now(), int64(-1)
	for time.Now().Before(deadline) && time.Since(lastChange) < quiet {
		done, total := true, int64(0)
		for i, m := range b.members {
			n := m.n.Load()
			total += n
			done = done && n >= want[i]
		}
		// The counts include what churn handed over again and sends that
		// failed on their client yet got in: only the check tells that
		// nothing is missing. It runs again only when more came.
		if done && total != checked {
			if l := b.check(); l.missing() == 0 {
				return
			}
			checked = total
		}
		if total != last {
			last, lastChange = total, time.Now()
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// allPairs lists every (member, group of the member).
func (b *bench) allPairs() []slot {
	var out []slot
	for i, m := range b.members {
		for _, g := range b.plan.groupsOf[m.user] {
			out = append(out, slot{i, g})
		}
	}
	return out
}

// open calls Open for each (member, group), in parallel.
func (b *bench) open(ctx context.Context, todo []slot) {
	_ = parallel(ctx, len(todo), b.cfg.Concurrency, func(ctx context.Context, i int) error {
		m := b.members[todo[i].member]
		c := m.client()
		if c == nil {
			return nil
		}
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := c.Open(octx, b.plan.gids[todo[i].group]); err != nil {
			b.rec.error(err)
		}
		return nil
	})
}
